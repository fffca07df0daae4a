// Package client is Ferry's Go client: typed calls for the REST API
// (openapi/openapi.yaml), one method per operation, and worker loops:
// [Client.Work] receives, handles, extends, acks and nacks a queue's
// messages, [Client.WorkEvents] a subscription's, and [Client.Consume]
// polls a consumer group, handles each partition in order and commits.
// It imports only the standard library.
//
// A [Client] is made with [New] and is safe for concurrent use. Every call
// takes a context and returns an [*Error] when Ferry answers with a problem
// (application/problem+json); branch on its Code, not its Detail.
//
// # Retries
//
// A call is retried (at most [WithRetries] times, with exponential backoff
// and jitter, waiting at least the answer's Retry-After) only when repeating
// it cannot do harm:
//
//   - on 429 every call is retried: Ferry wrote nothing (queue_full);
//   - on 503, 502, 504 and on network errors only idempotent calls are:
//     GET, PUT and DELETE; receive (messages claimed by a lost answer come
//     back when their visibility timeout ends); ack, nack and extend (a
//     repeat names a receipt already used, which changes nothing); send when
//     every message has a dedup_id, publish when every event has an id (a
//     repeat within the dedup window is a duplicate); redrive by ids;
//     seek, commit and leave.
//
// A send with a message without dedup_id, a publish with an event without
// id, a redrive by limit, a move, a key creation and a secret rotation are
// not retried on 503 or network errors: the first attempt may have
// committed, and a repeat would enqueue twice, move more or make another
// secret. Such a call returns the error and the caller decides. A group
// poll is retried on 429 only (see [Client.PollGroup]).
package client
