// Package sqsmd5 computes the checksums SQS returns with every message it
// takes or gives — MD5OfMessageBody, MD5OfMessageAttributes and
// MD5OfMessageSystemAttributes — byte for byte as SQS does, because the SDKs
// recompute them and fail the call when they differ (aws-sdk-go-v2 and the
// JavaScript SDK check the body; the Java and Kotlin SDKs check the
// attributes and system attributes too).
//
// # The body
//
// [Body]: the lowercase hex MD5 of the body's UTF-8 bytes, exactly as sent
// (SQS bodies are text; nothing is normalised).
//
// # Attributes
//
// [Attributes], the same scheme for message attributes and for message
// system attributes (today only AWSTraceHeader, DataType "String"): the
// attributes sorted by name, and for each, into one MD5:
//
//	4-byte big-endian length, name (UTF-8)
//	4-byte big-endian length, data type (UTF-8, e.g. "Number.float")
//	1 byte transport type: 1 String/Number, 2 Binary (custom ".label"
//	  types take their base type's)
//	4-byte big-endian length, value (UTF-8 text, or the raw binary bytes)
//
// An empty set has no checksum: SQS leaves the field out, and so should the
// caller when Attributes returns "". The names are sorted as SQS (a Java
// service) and the Java SDK sort them, by UTF-16 code units; this differs
// from Go's byte order only between a character above U+FFFF and one in
// U+E000–U+FFFF, which SQS's name rules (letters, digits, '_', '-', '.')
// never allow, but a checksum should not depend on that.
//
// On ReceiveMessage the checksum covers the attributes returned (those the
// request asked for), since that is what an SDK recomputes it from.
//
// The SDKs also define transport types 3 and 4 for the string and binary
// list values SQS reserves but does not accept; this package hashes them
// internally only, to check itself against the Java SDK's published test
// vector, and exports nothing for them.
package sqsmd5
