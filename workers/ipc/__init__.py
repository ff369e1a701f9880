"""Both ends of the wire between the parent and a worker: the command header and the slab
layout (``wire``), the slab itself, the channel a worker is given with the rest of its
launch, the parent's sender and the worker's receiver."""
