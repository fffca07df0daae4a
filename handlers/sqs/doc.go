// Package sqs is Ferry's SQS-compatible face: the Amazon SQS API, in both
// of its wire protocols, on Ferry's queues, so that the AWS SDKs and the
// libraries built on them run against Ferry by changing the endpoint and
// the credentials (API.md § SQS-compatible API; docs/sqs.md lists every
// action and attribute). It is a thin edge like package handlers, the REST
// face: it decodes, checks, calls the store — the one engine, with the
// REST face's own rules where they apply ([handlers.Limits.CheckMessage],
// [handlers.CheckQueueSettings], [handlers.QueueDeleteAndClean]) — and
// encodes.
//
// # Protocols
//
// [Mount] serves POST / and POST /000000000000/<queue> (a QueueUrl). A
// request with an X-Amz-Target header (AmazonSQS.<Action>) is AWS JSON 1.0:
// a JSON body, a JSON answer, errors as {"__type":
// "com.amazonaws.sqs#<Shape>", "message"} with the Query code in the
// x-amzn-query-error header ("<Code>;Sender"), from which the SDKs make
// their typed errors. Any other is the Query protocol: form-encoded
// parameters (Action=…, lists and maps flattened as Name.N and
// Name.N.Name/Value), XML answers in SQS's namespace, errors as an
// ErrorResponse. Every request is verified with SigV4 (package sigv4,
// service sqs) before its parameters are read; its key's permissions are
// those it has on REST (package access), checked before the queue is
// looked up.
//
// # Bodies and attributes on one broker
//
// An SQS body is stored as a JSON string, so a REST reader sees a string;
// a REST body that is not a string reaches SQS readers as its compact JSON
// text. Message attributes become REST attributes (a map of strings): a
// String attribute's value as it is, a Binary's in base64, and the data
// type of every attribute that is not plain "String" (Number, Binary,
// String.label, …) in the reserved attribute "sqs:types", a JSON object of
// name to type; AWSTraceHeader is kept in "sqs:AWSTraceHeader". No SQS name
// can hold a colon, so the two never meet an SQS attribute; a REST client
// that sets them changes what SQS readers see. A REST attribute is a String
// to SQS readers.
//
// # FIFO
//
// A queue whose name ends in .fifo is FIFO, whichever face made it:
// MessageGroupId is required and is the message's group (delivered one at
// a time, in order), MessageDeduplicationId — or, without one, the SHA-256
// of the body when ContentBasedDeduplication (the queue's
// content_based_dedup) is on, else the message is refused — its dedup_id,
// within the queue's dedup window (5 minutes by default). SequenceNumber is
// the message id, which grows with the queue's send order.
//
// # Settings and tags
//
// ReceiveMessageWaitTimeSeconds, MaximumMessageSize,
// ContentBasedDeduplication and the queue's tags are REST settings
// (receive_wait_seconds, max_message_size, content_based_dedup, tags), so
// each face reads what the other set. A message's size is measured as SQS
// measures it (messageFields.size), not in its stored form, which the
// REST limit measures: see docs/sqs.md § Messages.
//
// # Message move tasks
//
// StartMessageMoveTask runs the REST move ([handlers.MessageMove]) in
// steps in a goroutine of the instance that took it, which ends with the
// server; the task's record lives in that instance's memory, where
// ListMessageMoveTasks and CancelMessageMoveTask find it (movetasks.go).
package sqs
