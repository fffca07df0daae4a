package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// kindOf is how permissions name t's kind.
func kindOf(t target) access.Kind { return access.Kind(t.Kind) }

// decodeJSON decodes a REST answer, numbers kept as written.
func decodeJSON(b []byte, out any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(out)
}

// topicPage shows a topic: its partitions with head and oldest offsets,
// its events published a minute over the last hour, the event log of one partition from an offset or a time, and its
// subscriptions and groups that the key may read.
func (c *Console) topicPage(ec echo.Context, v viewer) error {
	topic := ec.Param("topic")
	api := "/v1/topics/" + pathEscape(topic)
	var obj, subs, groups map[string]any
	if status, text := c.get(ec, v, api, &obj); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	if status, text := c.get(ec, v, api+"/subscriptions?limit=100", &subs); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	if status, text := c.get(ec, v, api+"/groups?limit=100", &groups); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	q := url.Values{"limit": {"50"}, "partition": {orDefault(ec.QueryParam("partition"), "0")}}
	if t := strings.TrimSpace(ec.QueryParam("from_time")); t != "" {
		q.Set("from_time", t)
	} else {
		q.Set("from_offset", orDefault(ec.QueryParam("from_offset"), "0"))
	}
	var events map[string]any
	if status, text := c.get(ec, v, api+"/events?"+q.Encode(), &events); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	data := map[string]any{
		"Topic": topic, "Obj": obj, "Subs": subs, "Groups": groups, "Events": events,
		"Partition": q.Get("partition"), "FromOffset": q.Get("from_offset"), "FromTime": q.Get("from_time"),
	}
	if samples, err := store.TopicSampleList(ec.Request().Context(), c.pool, topic, chartWindow); err == nil {
		data["Chart"] = topicChart(samples, time.Now())
	} else {
		c.log.Warn("console: history not read", "error", err)
	}
	return c.render(ec, http.StatusOK, "topic", &v, "topic "+topic, data)
}

func orDefault(s, def string) string {
	if s = strings.TrimSpace(s); s == "" {
		return def
	}
	return s
}

// groupPage shows a consumer group: members, assignment, per-partition
// lag, and seek for a key that may manage it.
func (c *Console) groupPage(ec echo.Context, v viewer) error {
	topic, group := ec.Param("topic"), ec.Param("group")
	var obj map[string]any
	api := "/v1/topics/" + pathEscape(topic) + "/groups/" + pathEscape(group)
	if status, text := c.get(ec, v, api, &obj); status != 0 {
		return c.failAs(ec, v, status, text)
	}
	data := map[string]any{
		"Topic": topic, "Group": group, "Full": topic + "/" + group, "Obj": obj,
		"UI": "/ui/topics/" + pathEscape(topic) + "/groups/" + pathEscape(group),
	}
	if samples, err := store.GroupSampleList(ec.Request().Context(), c.pool, topic, group, chartWindow); err == nil {
		data["Chart"] = groupChart(samples, time.Now())
	}
	return c.render(ec, http.StatusOK, "group", &v, "group "+topic+"/"+group, data)
}

// groupSeek moves a group to earliest, latest, a time, or one
// partition's offset, after a confirmation.
func (c *Console) groupSeek(ec echo.Context, v viewer) error {
	topic, group := ec.Param("topic"), ec.Param("group")
	ui := "/ui/topics/" + pathEscape(topic) + "/groups/" + pathEscape(group)
	body, what, err := groupSeekBody(ec)
	if err != "" {
		return c.failAs(ec, v, http.StatusBadRequest, err)
	}
	if ec.FormValue("confirm") != "yes" {
		return c.render(ec, http.StatusOK, "confirm", &v, "Seek", map[string]any{
			"Action": ui + "/seek", "Title": "Seek the group", "What": what, "Back": ui,
			"Name": topic + "/" + group, "Fields": formFields(ec, "to", "partition", "offset"),
		})
	}
	r := c.call(ec, v, http.MethodPost, "/v1/topics/"+pathEscape(topic)+"/groups/"+pathEscape(group)+"/seek", body)
	if r.Status >= 300 {
		return c.failAs(ec, v, r.Status, r.problemDetail())
	}
	return c.render(ec, http.StatusOK, "done", &v, "Seek", map[string]any{"Title": "Seek the group " + what, "Name": topic + "/" + group, "Back": ui})
}

// groupSeekBody is a group seek's REST body: to (earliest, latest, a
// time), or a partition's offset.
func groupSeekBody(ec echo.Context) (any, string, string) {
	if to := trimmed(ec.FormValue("to"), 64); to != "" {
		return map[string]any{"to": to}, "to " + to, ""
	}
	p, o := trimmed(ec.FormValue("partition"), 12), trimmed(ec.FormValue("offset"), 24)
	off, err := strconv.ParseInt(o, 10, 64)
	if _, perr := strconv.Atoi(p); perr != nil || err != nil {
		return nil, "", "Give a target (earliest, latest or a time), or a partition and an offset, both whole numbers."
	}
	return map[string]any{"offsets": map[string]int64{p: off}}, "partition " + p + " to offset " + o, ""
}
