// Package console is Ferry's web console at /ui/ (API.md § Console): a
// face of its own, beside the REST face (package handlers) and the SQS
// face (package handlers/sqs), served by the same binary with every asset
// embedded (go:embed), drawn on the server with html/template. A page
// works without JavaScript; there is none.
//
// # Sessions
//
// Sign-in takes an API key, resolves it as a REST request would
// ([access.Resolver]) and sets a session cookie (HttpOnly, SameSite=Strict,
// Secure under TLS, path /ui) that holds the key's id, the session's end
// and a random nonce, MACed with a secret derived from the server's keys
// (every instance behind a load balancer derives the same). The key's
// secret is never kept, shown, put in a URL or logged. Every request
// resolves the session's key by id through the key cache ([Deps.KeyByID]),
// so a revoked or expired key ends its sessions as fast as it ends its
// REST requests (within a second).
//
// # One set of rules
//
// Every page reads, and every form acts, through the REST face itself,
// called in-process with the session's key ([handlers.WithKey]): the same
// route, validation, permission check, store call and audit entry as the
// key's own REST request. Only the overview reads the store directly (a
// search by part of a name, and the queues that need attention, which REST
// has no route for), filtered by the same [access.Key.Allows] read check
// that REST's lists apply. A control is shown only when the key's
// permissions allow its REST route; a forged form is refused by REST all
// the same.
//
// # Forms
//
// Every form that changes something carries a CSRF token (an HMAC of the
// session's nonce), checked before anything is done; redrive and purge ask
// for a confirmation first. Pages carry a strict Content-Security-Policy
// (no script at all, styles from /ui/static only, frame-ancestors 'none')
// and X-Frame-Options: DENY. Everything shown is escaped by html/template:
// a message body holding <script> is shown as text.
package console
