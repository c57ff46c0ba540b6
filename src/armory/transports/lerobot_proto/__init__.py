"""LeRobot's async-inference messages (``transport`` package), generated from services.proto."""
