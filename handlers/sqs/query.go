package sqs

import (
	"encoding/base64"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// form is a Query protocol request's parameters, flattened as the Query
// protocol flattens them (Attribute.1.Name, SendMessageBatchRequestEntry.2.Id),
// with its names sorted so that the names under a prefix are found by a
// binary search.
type form struct {
	vals url.Values
	keys []string
}

func newForm(vals url.Values) *form {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return &form{vals: vals, keys: keys}
}

// get is the value of the parameter name, if given.
func (f *form) get(name string) (string, bool) {
	vs, ok := f.vals[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// maxMembers bounds the members of one list or map of a request.
const maxMembers = 1000

// indices returns the member numbers given under prefix ("Attribute."):
// the N of every parameter named prefix+N or prefix+N+".…", in order.
func (f *form) indices(prefix string) ([]int, error) {
	start := sort.SearchStrings(f.keys, prefix)
	seen := map[int]bool{}
	var out []int
	for _, k := range f.keys[start:] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		rest := k[len(prefix):]
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || strconv.Itoa(n) != num {
			return nil, fail(codeMalformedQuery, "The parameter %s is not numbered as a list member (%s1, %s2, …).", k, prefix, prefix)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
		if len(out) > maxMembers {
			return nil, fail(codeMalformedQuery, "More than %d members under %s.", maxMembers, strings.TrimSuffix(prefix, "."))
		}
	}
	slices.Sort(out)
	return out, nil
}

// decodeForm fills the struct dst points to from the form, each field
// from the parameter its query tag names (its json tag when it has none),
// under prefix. A list is numbered members (Name.1, Name.2); a map is
// numbered Name/Value pairs (Attribute.1.Name, Attribute.1.Value; the tag
// may name other words: `query:"Tag,Key,Value"`); a map's struct value,
// like a list's struct member, has its fields under the member's prefix.
// []byte fields are base64.
func decodeForm(f *form, prefix string, dst reflect.Value) error {
	t := dst.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			if err := decodeForm(f, prefix, dst.Field(i)); err != nil {
				return err
			}
			continue
		}
		name, keyWord, valueWord := queryName(sf)
		if name == "" {
			continue
		}
		if err := decodeField(f, prefix+name, keyWord, valueWord, dst.Field(i)); err != nil {
			return err
		}
	}
	return nil
}

// queryName is a field's Query parameter name and, for a map, the words
// of its pairs.
func queryName(sf reflect.StructField) (name, key, value string) {
	key, value = "Name", "Value"
	tag := sf.Tag.Get("query")
	if tag == "" {
		tag, _, _ = strings.Cut(sf.Tag.Get("json"), ",")
	}
	parts := strings.Split(tag, ",")
	if len(parts) == 3 {
		key, value = parts[1], parts[2]
	}
	if parts[0] == "-" {
		return "", "", ""
	}
	return parts[0], key, value
}

// decodeField fills one field from the parameter(s) named name.
func decodeField(f *form, name, keyWord, valueWord string, v reflect.Value) error {
	t := v.Type()
	switch {
	case t.Kind() == reflect.String:
		s, _ := f.get(name)
		v.SetString(s)
	case t.Kind() == reflect.Pointer:
		s, ok := f.get(name)
		if !ok {
			return nil
		}
		p := reflect.New(t.Elem())
		if err := scalar(name, s, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		if s, ok := f.get(name); ok {
			return scalar(name, s, v)
		}
	case t.Kind() == reflect.Slice:
		return decodeList(f, name, v)
	case t.Kind() == reflect.Map:
		return decodeMap(f, name, keyWord, valueWord, v)
	}
	return nil
}

// scalar sets v (a string, int or []byte) from the parameter's text.
func scalar(name, s string, v reflect.Value) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return invalidParam(name, "must be an integer")
		}
		v.SetInt(int64(n))
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return invalidParam(name, "must be true or false")
		}
		v.SetBool(b)
	case reflect.Slice:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return invalidParam(name, "must be base64")
		}
		v.SetBytes(b)
	}
	return nil
}

// decodeList fills a list of strings or structs from name.1, name.2, ….
func decodeList(f *form, name string, v reflect.Value) error {
	idx, err := f.indices(name + ".")
	if err != nil || len(idx) == 0 {
		return err
	}
	list := reflect.MakeSlice(v.Type(), len(idx), len(idx))
	for i, n := range idx {
		member := name + "." + strconv.Itoa(n)
		el := list.Index(i)
		if el.Kind() == reflect.Struct {
			if err := decodeForm(f, member+".", el); err != nil {
				return err
			}
			continue
		}
		s, _ := f.get(member)
		if err := scalar(member, s, el); err != nil {
			return err
		}
	}
	v.Set(list)
	return nil
}

// decodeMap fills a map from name.N.<keyWord> and name.N.<valueWord>
// (a struct value from the parameters under name.N.<valueWord>.).
func decodeMap(f *form, name, keyWord, valueWord string, v reflect.Value) error {
	idx, err := f.indices(name + ".")
	if err != nil || len(idx) == 0 {
		return err
	}
	m := reflect.MakeMapWithSize(v.Type(), len(idx))
	for _, n := range idx {
		member := name + "." + strconv.Itoa(n) + "."
		k, ok := f.get(member + keyWord)
		if !ok {
			return missingParam(member + keyWord)
		}
		if m.MapIndex(reflect.ValueOf(k)).IsValid() {
			return invalidParam(name, "the name "+k+" is given twice")
		}
		el := reflect.New(v.Type().Elem()).Elem()
		if el.Kind() == reflect.Struct {
			if err := decodeForm(f, member+valueWord+".", el); err != nil {
				return err
			}
		} else {
			s, _ := f.get(member + valueWord)
			if err := scalar(member+valueWord, s, el); err != nil {
				return err
			}
		}
		m.SetMapIndex(reflect.ValueOf(k), el)
	}
	v.Set(m)
	return nil
}

// refOf is the value p points to, for decodeList and decodeMap.
func refOf(p any) reflect.Value { return reflect.ValueOf(p).Elem() }
