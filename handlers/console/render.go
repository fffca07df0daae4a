package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// pages holds each page's template, each parsed with the layout.
type pages struct{ byName map[string]*template.Template }

// loadPages parses the embedded templates (a broken one is a build
// mistake: it panics at start, and every test finds it).
func loadPages() *pages {
	funcs := template.FuncMap{"pretty": pretty, "path": pathEscape, "str": str, "list": func(xs ...string) []string { return xs }}
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		panic(err)
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		if strings.HasSuffix(n, "/layout.html") {
			continue
		}
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", n))
		p.byName[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return p
}

// page is what every template gets.
type page struct {
	Title string
	// Key is who is signed in (nil on the sign-in page).
	Key *access.Key
	// CSRF is the token every changing form carries.
	CSRF string
	Data any
}

// Can reports whether the signed-in key may do action on the resource of
// kind named name (as REST's permission check does): what decides whether
// a page shows a control.
func (p page) Can(kind, name, action string) bool {
	return p.Key != nil && p.Key.Allows(access.Kind(kind), name, access.Action(action))
}

// Admin reports whether the signed-in key may see keys and the audit log.
func (p page) Admin() bool { return p.Key != nil && p.Key.Allows(access.Admin, "", access.All) }

// render writes the named page with status.
func (c *Console) render(ec echo.Context, status int, name string, v *viewer, title string, data any) error {
	p := page{Title: title, Data: data}
	if v != nil {
		p.Key, p.CSRF = &v.key, c.csrfToken(v.session)
	}
	var buf bytes.Buffer
	if err := c.pages.byName[name].Execute(&buf, p); err != nil {
		c.log.Error("console: page failed", "page", name, "error", err)
		return ec.HTMLBlob(http.StatusInternalServerError, []byte("<!doctype html><title>Error</title><p>The page could not be drawn."))
	}
	return ec.HTMLBlob(status, buf.Bytes())
}

// fail answers a readable error page.
func (c *Console) fail(ec echo.Context, status int, text string) error {
	return c.render(ec, status, "error", nil, http.StatusText(status), map[string]any{"Status": status, "Text": text})
}

// failAs is fail for a signed-in viewer (the page keeps its navigation).
func (c *Console) failAs(ec echo.Context, v viewer, status int, text string) error {
	return c.render(ec, status, "error", &v, http.StatusText(status), map[string]any{"Status": status, "Text": text})
}

// static serves the embedded style sheet.
func (c *Console) static(ec echo.Context) error {
	name := ec.Param("*")
	b, err := staticFiles.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		return ec.NoContent(http.StatusNotFound)
	}
	ec.Response().Header().Set("Cache-Control", "public, max-age=3600")
	ctype := "text/css; charset=utf-8"
	if strings.HasSuffix(name, ".svg") {
		ctype = "image/svg+xml"
	}
	return ec.Blob(http.StatusOK, ctype, b)
}

// pretty is v as indented JSON text (escaped by the template where shown).
func pretty(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false) // the template escapes: <script> shows as written
	e.SetIndent("", "  ")
	if err := e.Encode(v); err != nil {
		return "?"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// str is v as text (JSON numbers and strings as they are, null as "").
func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "yes"
		}
		return "no"
	}
	return pretty(v)
}
