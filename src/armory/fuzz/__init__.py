"""Fuzzing the front doors: hostile messages beside one well-behaved robot.

- :mod:`~armory.fuzz.mutate`: structure-aware mutation of valid messages (extreme
  numbers, wrong types, missing and extra keys, malformed arrays, flipped bytes);
- :mod:`~armory.fuzz.messages`: a valid message of each door, and LeRobot's pickles
  written without LeRobot;
- :mod:`~armory.fuzz.doors`: one sender per door (openpi WebSocket, GR00T ZeroMQ,
  LeRobot gRPC) that sends one input and reports what came back;
- :mod:`~armory.fuzz.server`: the server under test, in a child process of its own;
- :mod:`~armory.fuzz.harness`: a run: the server, the good robot at 20 Hz, N inputs
  through one door, then the checks (no crash, no scheduling failure, every GR00T
  request answered, the good robot's largest gap, ``/healthz``, RSS).

``tests/test_fuzz_doors.py`` runs a bounded number of inputs per door (mutations and a
property-based generator); ``benchmarks/fuzz.py`` runs a million per door.
"""
