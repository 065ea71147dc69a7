"""The web UI's tests run against real nodes started by ``hearthnet node run``."""
