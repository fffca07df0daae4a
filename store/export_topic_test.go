package store

// PartitionNextSQL is partitionNextSQL, for tests that read a partition's
// next offset in SQL of their own.
var PartitionNextSQL = partitionNextSQL
