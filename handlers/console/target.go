package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

// target is a queue or a subscription, the two things that hold messages.
type target struct {
	Topic, Name string
	// Kind and Full are how permissions name it: queue:<name> or
	// subscription:<topic>/<name>.
	Kind, Full string
	// API and UI are its REST and console paths.
	API, UI string
}

func (t target) IsSub() bool { return t.Topic != "" }

// targetOf is the queue or subscription a request names.
func targetOf(ec echo.Context) target {
	if sub := ec.Param("sub"); sub != "" {
		topic := ec.Param("topic")
		base := "/topics/" + pathEscape(topic) + "/subscriptions/" + pathEscape(sub)
		return target{Topic: topic, Name: sub, Kind: "subscription", Full: topic + "/" + sub, API: "/v1" + base, UI: "/ui" + base}
	}
	q := ec.Param("queue")
	return target{Name: q, Kind: "queue", Full: q, API: "/v1/queues/" + pathEscape(q), UI: "/ui/queues/" + pathEscape(q)}
}

// targetPage shows a queue or subscription: settings and stats, its
// messages peeked, its dead letters with their last errors, push status
// and recent attempts, and the controls the key may use.
func (c *Console) targetPage(ec echo.Context, v viewer) error {
	t := targetOf(ec)
	var obj map[string]any
	if status, text := c.get(ec, v, t.API, &obj); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	data := map[string]any{"T": t, "Obj": obj, "State": ""}
	if v.key.Allows(kindOf(t), t.Full, "receive") {
		q := url.Values{"limit": {"20"}}
		if s := ec.QueryParam("state"); s != "" {
			q.Set("state", s)
			data["State"] = s
		}
		if a := ec.QueryParam("after"); a != "" {
			q.Set("after", a)
		}
		var peek, dls map[string]any
		if status, text := c.get(ec, v, t.API+"/messages?"+q.Encode(), &peek); status != 0 {
			return c.failAs(ec, v, status, text)
		}
		dq := url.Values{"limit": {"20"}}
		if a := ec.QueryParam("dlafter"); a != "" {
			dq.Set("after", a)
		}
		if status, text := c.get(ec, v, t.API+"/dead-letters?"+dq.Encode(), &dls); status != 0 {
			return c.failAs(ec, v, status, text)
		}
		data["Peek"], data["DeadLetters"] = peek, dls
	}
	if obj["push"] != nil && v.key.Allows(kindOf(t), t.Full, "manage") {
		var attempts map[string]any
		if status, _ := c.get(ec, v, t.API+"/attempts?limit=20", &attempts); status == 0 {
			data["Attempts"] = attempts
		}
	}
	if samples, err := store.QueueSampleList(ec.Request().Context(), c.pool, t.Topic, t.Name, chartWindow); err == nil {
		data["Charts"] = queueCharts(samples, time.Now())
	} else {
		c.log.Warn("console: history not read", "error", err)
	}
	return c.render(ec, http.StatusOK, "target", &v, t.Kind+" "+t.Full, data)
}

// targetAction is a form's action on a queue or subscription: the REST
// request it makes, whether it asks for a confirmation first, and what
// its success page says.
type targetAction struct {
	name, method, path string
	confirm            bool
	title              string
	body               func(ec echo.Context) (any, string)
}

// targetActions are the forms of a queue's or subscription's page; each
// is the REST route of the same name, so its permission and audit entry.
var targetActions = []targetAction{ //nolint:gochecknoglobals // a read-only table
	{name: "redrive", method: http.MethodPost, path: "/dead-letters/redrive", confirm: true, title: "Redrive dead letters", body: redriveBody},
	{name: "purge-dead-letters", method: http.MethodDelete, path: "/dead-letters", confirm: true, title: "Purge dead letters"},
	{name: "purge", method: http.MethodDelete, path: "/messages", confirm: true, title: "Purge messages"},
	{name: "enable", method: http.MethodPost, path: "/enable", title: "Enable push"},
	{name: "rotate-secret", method: http.MethodPost, path: "/rotate-secret", title: "Rotate the signing secret"},
	{name: "seek", method: http.MethodPost, path: "/seek", confirm: true, title: "Seek", body: seekBody},
}

// redriveBody is a redrive's REST body: the ids given, or up to 1000.
func redriveBody(ec echo.Context) (any, string) {
	if id := trimmed(ec.FormValue("id"), 200); id != "" {
		return map[string]any{"ids": []string{id}}, "the dead letter " + id
	}
	return map[string]any{"limit": 1000}, "up to 1000 dead letters"
}

// seekBody is a subscription seek's REST body.
func seekBody(ec echo.Context) (any, string) {
	to := trimmed(ec.FormValue("to"), 64)
	return map[string]any{"to": to}, "to " + to
}

// targetAction handles the form of a: a confirmation page first when a
// asks for one, then the REST request, then a page saying what happened
// (REST's refusal, if it refused).
func (c *Console) targetAction(a targetAction) func(echo.Context, viewer) error {
	return func(ec echo.Context, v viewer) error {
		t := targetOf(ec)
		var body any
		what := ""
		if a.body != nil {
			body, what = a.body(ec)
		}
		if a.confirm && ec.FormValue("confirm") != "yes" {
			return c.render(ec, http.StatusOK, "confirm", &v, a.title, map[string]any{
				"Action": t.UI + "/" + a.name, "Title": a.title, "What": what, "Back": t.UI,
				"Name": t.Full, "Fields": formFields(ec, "id", "to"),
			})
		}
		r := c.call(ec, v, a.method, t.API+a.path, body)
		if r.Status >= 300 {
			return c.failAs(ec, v, r.Status, r.problemDetail())
		}
		var result map[string]any
		_ = decodeJSON(r.Body, &result)
		return c.render(ec, http.StatusOK, "done", &v, a.title, map[string]any{"Title": a.title, "Name": t.Full, "Result": result, "Back": t.UI})
	}
}

// formFields are the named form values the request carries, to repeat on
// a confirmation page.
func formFields(ec echo.Context, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if v := strings.TrimSpace(ec.FormValue(n)); v != "" {
			out[n] = trimmed(v, 200)
		}
	}
	return out
}
