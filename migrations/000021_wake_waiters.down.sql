DROP TABLE IF EXISTS ferry.wake_waiters;
