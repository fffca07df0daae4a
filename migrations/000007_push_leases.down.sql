DROP TABLE IF EXISTS ferry.push_leases;
