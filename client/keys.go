package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Permission grants actions (send, receive, read, manage, publish,
// consume, *) on the resources a pattern names (queue:orders-*,
// subscription:orders/billing, admin, ...).
type Permission struct {
	Resource string   `json:"resource"`
	Actions  []string `json:"actions"`
}

// KeyRequest is a key to create; ExpiresAt nil never expires.
type KeyRequest struct {
	Name        string       `json:"name"`
	Permissions []Permission `json:"permissions"`
	ExpiresAt   *time.Time   `json:"expires_at,omitempty"`
}

// Key is an API key as Ferry shows it; Secret is set only in the answer of
// [Client.CreateKey].
type Key struct {
	ID          string       `json:"id"`
	Secret      string       `json:"key,omitempty"`
	Name        string       `json:"name"`
	Permissions []Permission `json:"permissions"`
	CreatedAt   time.Time    `json:"created_at"`
	ExpiresAt   *time.Time   `json:"expires_at"`
	LastUsedAt  *time.Time   `json:"last_used_at"`
}

// KeyList is one page of keys.
type KeyList struct {
	Keys []Key   `json:"keys"`
	Next *string `json:"next"`
}

// Items is the page's keys and the cursor of the next page.
func (l *KeyList) Items() ([]Key, *string) { return l.Keys, l.Next }

// AuditEntry is one recorded change (or attempt) of the audit log.
type AuditEntry struct {
	At              time.Time   `json:"at"`
	KeyID           string      `json:"key_id"`
	KeyName         string      `json:"key_name"`
	Action          string      `json:"action"`
	Resource        string      `json:"resource"`
	RequestID       string      `json:"request_id"`
	ClientRequestID *string     `json:"client_request_id"`
	Status          int         `json:"status"`
	PushChange      *PushChange `json:"push_change"`
}

// PushChange is the push host a request changed from and to.
type PushChange struct {
	FromHost *string `json:"from_host"`
	ToHost   *string `json:"to_host"`
}

// AuditList is one page of the audit log.
type AuditList struct {
	Entries []AuditEntry `json:"entries"`
	Next    *string      `json:"next"`
}

func keyPath(id string) string { return "/v1/keys/" + url.PathEscape(id) }

// CreateKey creates an API key and returns it with its secret (shown only
// here). It is not retried on 503 or network errors: a repeat would make a
// second key.
func (c *Client) CreateKey(ctx context.Context, k KeyRequest) (*Key, error) {
	out := &Key{}
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/keys", body: k}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ListKeys returns one page of the keys (without secrets).
func (c *Client) ListKeys(ctx context.Context, p Page) (*KeyList, error) {
	l := &KeyList{}
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/keys", query: p.query(), idempotent: true}, l); err != nil {
		return nil, err
	}
	return l, nil
}

// GetKey returns one key (without its secret).
func (c *Client) GetKey(ctx context.Context, id string) (*Key, error) {
	k := &Key{}
	if err := c.do(ctx, call{method: http.MethodGet, path: keyPath(id), idempotent: true}, k); err != nil {
		return nil, err
	}
	return k, nil
}

// DeleteKey revokes the key.
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: keyPath(id), idempotent: true}, nil)
}

// ListAuditLog returns one page of the audit log, newest first.
func (c *Client) ListAuditLog(ctx context.Context, p Page) (*AuditList, error) {
	l := &AuditList{}
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/audit", query: p.query(), idempotent: true}, l); err != nil {
		return nil, err
	}
	return l, nil
}

// Health reports whether the process is up (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, call{method: http.MethodGet, path: "/healthz", idempotent: true}, nil)
}

// Ready reports whether Ferry can serve: its database answers and its
// schema is current (GET /readyz; a 503 *Error when not).
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, call{method: http.MethodGet, path: "/readyz"}, nil)
}

// Metrics returns the Prometheus text of GET /metrics.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var w textBody
	err := c.do(ctx, call{method: http.MethodGet, path: "/metrics", idempotent: true}, &w)
	return string(w), err
}

// OpenAPI returns the spec Ferry serves (GET /openapi.yaml), as YAML.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var w textBody
	err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.yaml", idempotent: true}, &w)
	return []byte(w), err
}

// textBody receives an answer's body as is, not decoded (see [Client.once]).
type textBody []byte
