// Package handlers is Ferry's HTTP edge: it decodes and validates requests,
// makes one store call (or one transaction) and encodes the answer. Errors
// of every kind become RFC 9457 problems in one error handler.
//
// # Wire types
//
// A type a handler decodes is named for its request and ends in Request
// (queueRequest, sendRequest); an element of a request's list ends in Item
// (sendItem, publishItem). A type a handler encodes, and each part of one,
// ends in Reply (queueReply, sendReply, sendItemReply, messageHeadReply):
// it is what the function reply writes. One suffix for a whole answer and
// its parts, so that a name says which way the type crosses the wire; Reply
// rather than Response, so that none reads as net/http's or Echo's
// Response. [Problem] and [FieldError], the error body, keep their names.
//
// # Layout
//
// A file per concept, read from the ground up: problem.go, reply.go,
// name.go, query.go, checks.go, limits.go, json_number.go and
// json_strict.go (the strict pass), page.go and route_rule.go (each /v1
// route's permission) need no handler; handler.go holds [Deps], [KeyStore]
// and the handler; middleware.go, error_handler.go, request_decode.go, target.go,
// deep_value.go, audit.go and permission.go serve every route; then one
// file per resource (queue, message, message_peek, dead_letter, dead_letter_queue, push,
// resource, topic, event, subscription, consumer_group, key); routes.go, with [New], and
// operational.go stand on top. The other faces live in rooms of their
// own beside it: handlers/sqs (the SQS API) and handlers/console (the web
// console at /ui/, which calls these routes in-process, [WithKey]).
package handlers
