"""What the gateway does when something fails under it, and how soon: a worker killed or
hung (``faults``), connections cut mid-utterance and resumed (``resume``), a replica behind
HAProxy taken out and brought back (``haproxy``), the descriptor table full
(``descriptors``), and hours of sessions opened, closed and abandoned, then checked for
leaks (``soak``).
"""
