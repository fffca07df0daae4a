package server

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// DefaultConfig is the configuration of an empty environment: every field
// its default tag, as envconfig gives it when the field's variable is
// unset. The test servers (internal/testkit/ferrytest) and the benchmark start
// from it; [LoadConfig] reads the environment over it.
func DefaultConfig() Config {
	var c Config
	c.setFromTags("default", func(string) bool { return true })
	return c
}

// LoadConfig reads the FERRY_* environment (each field's envconfig tag
// is its variable's whole name: with a prefix, envconfig would fall back
// to the unprefixed name, and a DATABASE_URL or LISTEN meant for another
// program on the machine would configure Ferry): a variable that is unset
// takes its field's default tag or, with dev (`ferry dev`), its dev tag
// where it has one. `ferry dev`'s private database trusts every local
// connection and its admin key is printed on the console, so it serves
// this machine only; webhook receivers run on localhost there, so push
// may reach private addresses.
func LoadConfig(dev bool) (Config, error) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		return Config{}, err
	}
	if dev {
		c.setFromTags("dev", func(name string) bool {
			_, set := os.LookupEnv(name)
			return !set
		})
	}
	return c, nil
}

// setFromTags sets every field that has the tag, and whose variable name
// (its envconfig tag) unset accepts, to the tag's value.
func (c *Config) setFromTags(tag string, unset func(name string) bool) {
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		value, ok := f.Tag.Lookup(tag)
		if !ok || !unset(f.Tag.Get("envconfig")) {
			continue
		}
		if err := setField(v.Field(i), value); err != nil {
			panic(fmt.Sprintf("server: Config.%s: %s tag %q: %v", f.Name, tag, value, err))
		}
	}
}

// setField sets a Config field from its text, as envconfig reads it.
func setField(f reflect.Value, text string) error {
	switch {
	case f.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(text)
		f.SetInt(int64(d))
		return err
	case f.Kind() == reflect.String:
		f.SetString(text)
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(text)
		f.SetBool(b)
		return err
	case f.CanInt():
		n, err := strconv.ParseInt(text, 0, f.Type().Bits())
		f.SetInt(n)
		return err
	default:
		return fmt.Errorf("no parser for %s", f.Type())
	}
	return nil
}
