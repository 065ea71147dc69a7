"""What every layer may use: worker threads, the blocking-call helper, SQLite transactions,
process settings, lazy package exports and logging set-up (no capability, no protocol)."""
