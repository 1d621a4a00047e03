"""Where analyses run and their results live: scheduler, worker pool, disk cache."""
