package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
)

// keysPage lists the keys (no secrets) with a form to make one and a
// control to revoke each: admin keys only (REST refuses others).
func (c *Console) keysPage(ec echo.Context, v viewer) error {
	q := url.Values{"limit": {"100"}}
	if a := ec.QueryParam("after"); a != "" {
		q.Set("after", a)
	}
	var keys map[string]any
	if status, text := c.get(ec, v, "/v1/keys?"+q.Encode(), &keys); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	return c.render(ec, http.StatusOK, "keys", &v, "Keys", map[string]any{"Keys": keys})
}

// keyCreate makes a key from the form (one resource and its actions) and
// shows its secret, once.
func (c *Console) keyCreate(ec echo.Context, v viewer) error {
	form, _ := ec.FormParams()
	actions := []string{}
	for _, a := range form["action"] {
		actions = append(actions, trimmed(a, 16))
	}
	if len(actions) > 8 {
		return c.failAs(ec, v, http.StatusBadRequest, "Too many actions.")
	}
	body := map[string]any{
		"name":        trimmed(ec.FormValue("name"), 200),
		"permissions": []any{map[string]any{"resource": trimmed(ec.FormValue("resource"), 300), "actions": actions}},
	}
	if e := strings.TrimSpace(ec.FormValue("expires_at")); e != "" {
		body["expires_at"] = trimmed(e, 64)
	}
	r := c.call(ec, v, http.MethodPost, "/v1/keys", body)
	if r.Status != http.StatusCreated {
		return c.failAs(ec, v, r.Status, r.problemDetail())
	}
	var made map[string]any
	_ = decodeJSON(r.Body, &made)
	return c.render(ec, http.StatusOK, "done", &v, "Key created", map[string]any{
		"Title": "Key created", "Name": made["name"], "Secret": made["key"], "Back": "/ui/keys",
	})
}

// keyRevoke deletes a key after a confirmation.
func (c *Console) keyRevoke(ec echo.Context, v viewer) error {
	id := ec.Param("id")
	if ec.FormValue("confirm") != "yes" {
		return c.render(ec, http.StatusOK, "confirm", &v, "Revoke key", map[string]any{
			"Action": "/ui/keys/" + pathEscape(id) + "/revoke", "Title": "Revoke the key", "What": "",
			"Back": "/ui/keys", "Name": id, "Fields": map[string]string{},
		})
	}
	r := c.call(ec, v, http.MethodDelete, "/v1/keys/"+pathEscape(id), nil)
	if r.Status >= 300 {
		return c.failAs(ec, v, r.Status, r.problemDetail())
	}
	return c.render(ec, http.StatusOK, "done", &v, "Key revoked", map[string]any{"Title": "Key revoked", "Name": id, "Back": "/ui/keys"})
}

// auditPage shows the audit log, newest first.
func (c *Console) auditPage(ec echo.Context, v viewer) error {
	q := url.Values{"limit": {"100"}}
	if a := ec.QueryParam("after"); a != "" {
		q.Set("after", a)
	}
	var entries map[string]any
	if status, text := c.get(ec, v, "/v1/audit?"+q.Encode(), &entries); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	return c.render(ec, http.StatusOK, "audit", &v, "Audit log", map[string]any{"Entries": entries})
}
