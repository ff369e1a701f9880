"""What the gateway serves: the models sessions choose by name, each with its own pools
(``table``), read from an ``ASR_MODELS`` file (``models_file``) or made from the ``ASR_*MODEL``
settings; pure data, below the settings."""
