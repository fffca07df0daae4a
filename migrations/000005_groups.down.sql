DROP TABLE IF EXISTS ferry.group_partitions, ferry.group_members, ferry.consumer_groups;
