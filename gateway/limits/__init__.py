"""What one client may cost the others: places (admission), the audio all sessions hold
(budget), a session's deadlines and sizes, frame rates, access (keys, origins, per-address
caps) and concurrent file transcriptions. Sans I/O where it can be: the caller passes the
time."""
