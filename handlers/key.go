package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// Scoped API keys (API.md § Access control): POST, GET and DELETE
// /v1/keys, for keys with the admin permission (routeRules). A key's
// secret is in POST's answer only; the store keeps its hash and, with a
// server key (FERRY_SECRET_KEY), the secret sealed under it for SigV4.

// maxKeyPermissions bounds the permissions of one key: each request
// checks them in turn.
const maxKeyPermissions = 1000

type keyRequest struct {
	Name        *string       `json:"name"`
	Permissions []access.Spec `json:"permissions"`
	ExpiresAt   *string       `json:"expires_at"`
}

// keyReply is a key as GET shows it: never its secret.
type keyReply struct {
	ID          string        `json:"id"`
	Name        string        `json:"name"`
	Permissions []access.Spec `json:"permissions"`
	CreatedAt   time.Time     `json:"created_at"`
	ExpiresAt   *time.Time    `json:"expires_at"`
	LastUsedAt  *time.Time    `json:"last_used_at"`
}

// createdKeyReply is POST's answer: the key and, this once, its secret.
type createdKeyReply struct {
	keyReply
	Key string `json:"key"`
}

// keyRoutes registers the key routes.
func (h *handler) keyRoutes(v1 addRoute) {
	v1(http.MethodPost, "/keys", h.keyCreate)
	v1(http.MethodGet, "/keys", h.keyList, "limit", "after")
	v1(http.MethodGet, "/keys/:id", h.keyGet)
	v1(http.MethodDelete, "/keys/:id", h.keyDelete)
}

func toKeyResponse(k store.APIKey) (keyReply, error) {
	out := keyReply{ID: store.FormatKeyID(k.ID), Name: k.Name, CreatedAt: k.CreatedAt.UTC()}
	if err := json.Unmarshal(k.Permissions, &out.Permissions); err != nil {
		return keyReply{}, fmt.Errorf("api key %s: stored permissions: %w", out.ID, err)
	}
	if out.Permissions == nil {
		out.Permissions = []access.Spec{}
	}
	if k.ExpiresAt != nil {
		t := k.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	if k.LastUsedAt != nil {
		t := k.LastUsedAt.UTC()
		out.LastUsedAt = &t
	}
	return out, nil
}

// params validates the request: a name as resources are named, a
// permissions list access.Parse takes (written back as it parsed it,
// actions without repeats), and an expiry in the future or none.
func (r keyRequest) params(now time.Time) (store.KeyCreateParams, error) {
	var cs checks
	var p store.KeyCreateParams
	switch {
	case r.Name == nil:
		cs.add("name", "is required")
	case !nameRe.MatchString(*r.Name):
		cs.add("name", "must match %s", nameRe)
	default:
		p.Name = *r.Name
	}
	switch {
	case r.Permissions == nil:
		cs.add("permissions", "is required (a list of {\"resource\", \"actions\"}; [] for a key that may do nothing)")
	case len(r.Permissions) > maxKeyPermissions:
		cs.add("permissions", "has %d items; a key has at most %d", len(r.Permissions), maxKeyPermissions)
	default:
		grants, err := access.Parse(r.Permissions)
		var se *access.SpecError
		if errors.As(err, &se) {
			cs.add(fmt.Sprintf("permissions[%d].%s", se.Index, se.Field), "%s", se.Message)
		} else if err != nil {
			return p, err
		} else {
			p.Permissions, _ = json.Marshal(access.Specs(grants))
		}
	}
	if r.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *r.ExpiresAt)
		switch {
		case err != nil:
			cs.add("expires_at", "must be an RFC 3339 time or null")
		case !t.After(now):
			cs.add("expires_at", "must be in the future (null: the key never expires)")
		default:
			p.ExpiresAt = &t
		}
	}
	return p, cs.err()
}

func (h *handler) keyCreate(c echo.Context) error {
	var req keyRequest
	if err := h.decode(c, &req, false); err != nil {
		return err
	}
	p, err := req.params(time.Now())
	if err != nil {
		return err
	}
	p.Sealer = h.Keys.Sealer
	k, secret, err := store.KeyCreate(c.Request().Context(), h.Pool, h.Keys.Hasher, p)
	if err != nil {
		return err
	}
	if h.Keys.ForgetMissing != nil {
		h.Keys.ForgetMissing() // before the secret is shown: never refused here
	}
	out, err := toKeyResponse(k)
	if err != nil {
		return err
	}
	return reply(c, http.StatusCreated, createdKeyReply{keyReply: out, Key: secret})
}

func (h *handler) keyList(c echo.Context) error {
	page, err := pageOf(c, "keys")
	if err != nil {
		return err
	}
	keys, more, err := store.KeyList(c.Request().Context(), h.Pool, store.PageParams{After: page.after, Limit: page.limit})
	if err != nil {
		return err
	}
	out := make([]keyReply, len(keys))
	var last string
	for i, k := range keys {
		if out[i], err = toKeyResponse(k); err != nil {
			return err
		}
		last = out[i].ID
	}
	return page.reply(c, out, more, last)
}

// noSuchKey is the 404 of an id no key has. Key ids are opaque: one
// Ferry never issued (malformed) is a 404 like an unknown one.
func noSuchKey() error { return problem(http.StatusNotFound, codeNotFound, "no API key has this id") }

// keyID is the stored id of the key the path names.
func keyID(c echo.Context) (int64, error) {
	id, ok := store.ParseKeyID(c.Param("id"))
	if !ok {
		return 0, noSuchKey()
	}
	return id, nil
}

func (h *handler) keyGet(c echo.Context) error {
	id, err := keyID(c)
	if err != nil {
		return err
	}
	k, err := store.KeyGet(c.Request().Context(), h.Pool, id)
	if errors.Is(err, store.ErrNotFound) {
		return noSuchKey()
	} else if err != nil {
		return err
	}
	out, err := toKeyResponse(k)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, out)
}

// keyDelete deletes a key: every instance refuses it once it has heard
// the delete's NOTIFY (this one at once). The admin key
// (FERRY_ADMIN_KEY, id "admin") is not stored and cannot be deleted: a
// 409 that says how to replace it.
func (h *handler) keyDelete(c echo.Context) error {
	if c.Param("id") == access.AdminKeyID {
		return problem(http.StatusConflict, codeConflict,
			"the admin key (FERRY_ADMIN_KEY) cannot be deleted through the API; to replace it, change FERRY_ADMIN_KEY and restart every instance")
	}
	id, err := keyID(c)
	if err != nil {
		return err
	}
	err = store.KeyDelete(c.Request().Context(), h.Pool, id)
	if h.Keys.Forget != nil {
		h.Keys.Forget()
	}
	if errors.Is(err, store.ErrNotFound) {
		return noSuchKey()
	} else if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
