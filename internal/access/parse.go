package access

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Spec is one permission as a client writes it (POST /v1/keys):
// {"resource": "queue:billing-*", "actions": ["send", "receive"]}.
type Spec struct {
	Resource string   `json:"resource"`
	Actions  []string `json:"actions"`
}

// SpecError is a permission that does not parse: Index is its place in the
// list, Field "resource" or "actions".
type SpecError struct {
	Index   int
	Field   string
	Message string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("permissions[%d].%s: %s", e.Index, e.Field, e.Message)
}

// globRe is a glob: a name (API.md § Conventions) in which `*` may stand
// anywhere for a run of name characters.
var globRe = regexp.MustCompile(`^[A-Za-z0-9*][A-Za-z0-9._*-]{0,127}$`)

// Parse checks a list of permissions and returns their grants, in order.
// The first permission that does not parse is a [*SpecError] naming it. An
// empty list is allowed (a key that may do nothing); a list of one
// permission per kind and glob is not required (grants add up).
func Parse(specs []Spec) ([]Grant, error) {
	grants := make([]Grant, 0, len(specs))
	for i, s := range specs {
		g, err := parseOne(s)
		if err != nil {
			err.Index = i
			return nil, err
		}
		grants = append(grants, g)
	}
	return grants, nil
}

func parseOne(s Spec) (Grant, *SpecError) {
	g, err := parseResource(s.Resource)
	if err != nil {
		return Grant{}, err
	}
	if len(s.Actions) == 0 {
		return Grant{}, &SpecError{Field: "actions", Message: fmt.Sprintf("%s: at least one action is required (%s)", s.Resource, actionsOf(g.Kind))}
	}
	for _, a := range s.Actions {
		act := Action(a)
		ok := act == All || slices.Contains(kindActions[g.Kind], act)
		if !ok {
			return Grant{}, &SpecError{Field: "actions", Message: fmt.Sprintf("%s: unknown action %q for %s (%s)", s.Resource, a, g.Kind, actionsOf(g.Kind))}
		}
		if !slices.Contains(g.Actions, act) {
			g.Actions = append(g.Actions, act)
		}
	}
	return g, nil
}

// actionsOf says which actions kind k takes.
func actionsOf(k Kind) string {
	names := []string{}
	for _, a := range kindActions[k] {
		names = append(names, string(a))
	}
	names = append(names, string(All))
	return "it takes " + strings.Join(names, ", ")
}

// parseResource reads "queue:<glob>", "topic:<glob>",
// "subscription:<topic glob>/<sub glob>", "group:<topic glob>/<group glob>"
// or "admin".
func parseResource(r string) (Grant, *SpecError) {
	bad := func(format string, args ...any) (Grant, *SpecError) {
		return Grant{}, &SpecError{Field: "resource", Message: fmt.Sprintf("%q: ", r) + fmt.Sprintf(format, args...)}
	}
	if r == string(Admin) {
		return Grant{Resource: r, Kind: Admin}, nil
	}
	kind, rest, ok := strings.Cut(r, ":")
	k := Kind(kind)
	if !ok || k == Admin || kindActions[k] == nil {
		return bad("unknown resource (queue:<glob>, topic:<glob>, subscription:<topic glob>/<sub glob>, group:<topic glob>/<group glob> or admin)")
	}
	g := Grant{Resource: r, Kind: k, Name: rest}
	if nested(k) {
		if g.Topic, g.Name, ok = strings.Cut(rest, "/"); !ok {
			return bad("a %s is named <topic glob>/<%s glob>", k, k)
		}
		if !globRe.MatchString(g.Topic) {
			return bad("the topic glob %q is not a name with `*` wildcards (%s)", g.Topic, globRe)
		}
	}
	if !globRe.MatchString(g.Name) {
		return bad("the %s glob %q is not a name with `*` wildcards (%s)", k, g.Name, globRe)
	}
	return g, nil
}

// Specs returns the grants as a client wrote them (for GET /v1/keys).
func Specs(grants []Grant) []Spec {
	out := make([]Spec, len(grants))
	for i, g := range grants {
		acts := make([]string, len(g.Actions))
		for j, a := range g.Actions {
			acts[j] = string(a)
		}
		out[i] = Spec{Resource: g.Resource, Actions: acts}
	}
	return out
}
