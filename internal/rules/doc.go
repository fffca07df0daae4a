// Package rules is the Go text of the rules a message or event meets,
// shared by every Go face: the REST decode refuses what a rule refuses,
// and the push engine ([github.com/ferry-mq/ferry/internal/push]) checks a
// stored value by the same rule before it uses it. One rule, one text: a
// face never carries its own copy.
//
// It is a leaf: it imports nothing of Ferry's.
package rules
