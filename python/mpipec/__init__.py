"""mpipec: compile Mpipe pipeline plans (the `mpipec` command) and run them with torch (mpipec.torch)."""
