"""What every layer of the server shares and nothing of Armory underlies: the exception
tree (`errors`) and the forward-pass latency model (`latency_profile`)."""
