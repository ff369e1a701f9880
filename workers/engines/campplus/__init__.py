"""CAM++: speaker embeddings of a file, clustered into who spoke when."""
