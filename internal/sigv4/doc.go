// Package sigv4 verifies AWS Signature Version 4 on requests a server
// receives: the authentication of Ferry's SQS-compatible API, where the
// access key id is a Ferry key's id and the secret access key its secret.
//
// A [Verifier] names the service ("sqs") and how to look up a secret;
// [Verifier.Verify] takes the request as the HTTP server delivered it, its
// whole body and the time, and returns who signed it ([Signed]) or an
// [*Error] whose [Code] and Message are what SQS answers. The package knows
// nothing of Ferry's keys, store or protocols.
//
// # What is checked, in order
//
// Cheap checks come first, so that junk costs a parse and no key lookup.
// Each step names the code its refusals get:
//
//  1. An Authorization header `AWS4-HMAC-SHA256 Credential=…,
//     SignedHeaders=…, Signature=…` with one X-Amz-Date header, or presigned
//     query parameters (X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date,
//     X-Amz-SignedHeaders, X-Amz-Signature, optional X-Amz-Expires of 1 s
//     to 7 days); never both. None at all → MissingAuthenticationToken; a
//     part missing or repeated, another algorithm (SigV2, SigV4a), an
//     X-Amz-Date not in ISO 8601 basic format or a bad X-Amz-Expires →
//     IncompleteSignature.
//  2. The credential scope `<key id>/<YYYYMMDD>/<region>/<service>/aws4_request`:
//     the service is the Verifier's, any region name is accepted, and the
//     day is X-Amz-Date's day → SignatureDoesNotMatch, in AWS's words
//     ("Credential should be scoped to correct service: 'sqs'."); an empty
//     key id → InvalidClientTokenId.
//  3. X-Amz-Date within [MaxSkew] (15 minutes) of now, either way →
//     SignatureDoesNotMatch, marked [Error.Expired] (see Time below).
//  4. SignedHeaders sorted, distinct, lowercase, `host` among them, and a
//     signature of 64 lowercase hex digits → SignatureDoesNotMatch.
//  5. The secret, from [SecretFunc]: [ErrUnknownKey] → InvalidClientTokenId;
//     another error is returned as the server's own, not as an *Error.
//  6. The payload: X-Amz-Content-Sha256, when sent, must be the body's
//     SHA-256 in hex → SignatureDoesNotMatch.
//  7. The signature: HMAC-SHA256 of the string to sign under the key derived
//     from the secret, compared in constant time ([crypto/hmac.Equal]) →
//     SignatureDoesNotMatch, with the canonical request and string to sign
//     the server computed ([Error.CanonicalRequest]).
//
// The caller passes the body exactly as it arrived (no decoding), read
// whole within its own size limit.
//
// # The canonical request
//
// Built from the request as it arrived, the way AWS and aws-sdk-go-v2's
// signer build it for every service but S3:
//
//   - Path: the wire path (r.RequestURI, not r.URL, which Go decodes and
//     re-encodes) URI-encoded once more, '/' kept. A client encodes a
//     segment once to send it and signs it encoded twice; "/my queue" is
//     sent as "/my%20queue" and signed as "/my%2520queue". The path is not
//     normalised: botocore and the AWS C signer remove "." segments and
//     repeated slashes before signing, aws-sdk-go-v2 does not, and the SQS
//     face serves only "/" and "/<account>/<queue>", where the two agree.
//     Verifying the path as sent keeps what was signed and what is routed
//     one and the same.
//   - Query: every name and value decoded, URI-encoded (space as %20), then
//     sorted by name and value; a presigned request leaves out
//     X-Amz-Signature. A query that does not parse is refused rather than
//     signed without its bad part.
//   - Headers: exactly those in SignedHeaders, each `name:value` with the
//     value trimmed, runs of spaces collapsed, repeated headers joined by
//     ','. A header the client signed but the request lacks signs as empty,
//     so removing it breaks the signature; a header added but not signed
//     (User-Agent, Accept-Encoding: a proxy's or a transport's) changes
//     nothing. Host comes from r.Host, as the client sent it: a reverse proxy
//     in front of the server must pass Host through unchanged.
//   - Payload hash: always the SHA-256 of the body. X-Amz-Content-Sha256
//     may repeat it (S3 habit) but not replace it: `UNSIGNED-PAYLOAD` is
//     refused. S3 accepts it for large uploads; an SQS request's body is the
//     whole call, and leaving it unsigned would let anyone who sees a
//     request send another within 15 minutes. aws-sdk-go-v2's SQS client
//     signs the body of every action.
//
// # Time
//
// X-Amz-Date must be within 15 minutes of the server's clock, before or
// after. SQS answers a request outside that window with
// SignatureDoesNotMatch ("Signature expired: 20240220T151817Z is now earlier
// than 20240220T152440Z (20240220T153940Z - 15 min.)", as SQS users have
// reported it), not RequestExpired; Verify does the same and marks the
// error [Error.Expired]. It matters beyond fidelity: aws-sdk-go-v2's retryer
// treats SignatureDoesNotMatch with a skewed response Date header as clock
// skew, corrects its clock and retries, and does not for RequestExpired. A caller that prefers
// RequestExpired can map Expired errors to it.
//
// A presigned request obeys the same window (SQS is reported to limit
// presigned URLs to 15 minutes whatever X-Amz-Expires says); X-Amz-Expires,
// when given (1 s to 7 days), can only shorten it.
//
// # Bounds
//
// Authorization ≤ 8 KiB, credential ≤ 512 bytes, access key id ≤ 128,
// region ≤ 64, ≤ 64 signed headers whose values total ≤ 64 KiB, query
// ≤ 1 MiB and ≤ 1000 parameters. The body is the caller's to bound; it is
// hashed only after the key lookup.
//
// # Not supported
//
// The Date header in place of X-Amz-Date, session tokens
// (X-Amz-Security-Token signs like any header; Ferry's keys have none),
// SigV4a, and chunked (streaming) payload signing. No signing key is cached:
// deriving one is four HMACs, a few microseconds next to the secret lookup,
// and a cache would keep secrets (or keys made from them) alive after a key
// is revoked.
package sigv4
