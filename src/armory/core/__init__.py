"""What every layer of the server shares and nothing of Armory underlies: the exception
tree (`errors`), the forward-pass latency model (`latency_profile`) and its measured files
(`profile_file`)."""
