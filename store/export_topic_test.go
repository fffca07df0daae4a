package store

// PartitionNextSQL is partitionNextSQL, for tests that read a partition's
// next offset in SQL of their own.
var PartitionNextSQL = partitionNextSQL

// GroupCommittedSQL is groupCommittedSQL, for tests that read a group's
// committed offsets.
var GroupCommittedSQL = groupCommittedSQL
