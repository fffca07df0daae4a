package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ferry-mq/ferry/client"
)

// The command-line client: `ferry <noun> <verb>` talks to a running Ferry
// (FERRY_URL and FERRY_KEY, or --url and --api-key) through package client.
// Exit codes: 0 done, 1 failed (Ferry answered a problem, or could not be
// reached), 2 the command line is wrong.

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// cli is what a command runs with.
type cli struct {
	c      *client.Client
	in     io.Reader
	out    io.Writer
	output string // "table" or "json"
}

// command is one `ferry <noun> [<noun>] <verb>`.
type command struct {
	path  string // "queue dead-letters ls"
	args  string // the positionals, for the usage line ("QUEUE [BODY]")
	help  string
	nargs [2]int // the least and the most positionals (-1: no most)
	// setup defines the command's flags on fs and returns what runs it.
	setup func(fs *flag.FlagSet, x *cli) func(ctx context.Context, args []string) error
}

// commands is every CLI command, in the order `ferry help` lists them.
func commands() []command {
	var all []command
	for _, group := range [][]command{queueCommands(), topicCommands(), subCommands(), groupCommands(), keyCommands()} {
		all = append(all, group...)
	}
	return all
}

// isCLI reports whether word starts a CLI command.
func isCLI(word string) bool {
	for _, c := range commands() {
		if strings.HasPrefix(c.path, word+" ") {
			return true
		}
	}
	return word == "completion"
}

// runCLI runs the command args name and returns the exit code.
func runCLI(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdin, stdout, stderr)
	var u *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		fmt.Fprintln(stderr, "ferry:", err)
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	fmt.Fprintln(stderr, "ferry:", err)
	return 1
}

// find returns the command whose path args start with, and the rest.
func find(args []string) (command, []string, bool) {
	best, n := command{}, 0
	for _, c := range commands() {
		words := strings.Fields(c.path)
		if len(words) <= len(args) && len(words) > n && strings.Join(args[:len(words)], " ") == c.path {
			best, n = c, len(words)
		}
	}
	return best, args[min(n, len(args)):], n > 0
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if args[0] == "completion" {
		return completion(args[1:], stdout)
	}
	cmd, rest, ok := find(args)
	if !ok {
		listCommands(stderr, args[0])
		if len(args) == 1 {
			return usagef("ferry %s needs a command (listed above)", args[0])
		}
		return usagef("unknown command %q", strings.Join(args[:2], " "))
	}
	x := &cli{in: stdin, out: stdout}
	fs := flag.NewFlagSet("ferry "+cmd.path, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", os.Getenv("FERRY_URL"), "Ferry's base URL (default $FERRY_URL)")
	key := fs.String("api-key", os.Getenv("FERRY_KEY"), "the API key (default $FERRY_KEY)")
	fs.StringVar(&x.output, "output", "table", "table or json")
	fs.StringVar(&x.output, "o", "table", "short for --output")
	runFn := cmd.setup(fs, x)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ferry %s %s [flags]\n\n%s\n\nflags:\n", cmd.path, cmd.args, cmd.help)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if len(pos) < cmd.nargs[0] || (cmd.nargs[1] >= 0 && len(pos) > cmd.nargs[1]) {
		fs.Usage()
		return usagef("ferry %s takes %s", cmd.path, strings.TrimSpace(cmd.args+" (see --help)"))
	}
	if x.output != "table" && x.output != "json" {
		return usagef("--output must be table or json, not %q", x.output)
	}
	if *url == "" || *key == "" {
		return usagef("no Ferry to talk to: set FERRY_URL and FERRY_KEY (or --url and --api-key)")
	}
	x.c = client.New(*url, *key)
	return runFn(ctx, pos)
}

// parseInterleaved parses flags anywhere among the positionals (the flag
// package stops at the first positional) and returns the positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// listCommands prints the commands under noun (all when it names none).
func listCommands(w io.Writer, noun string) {
	var lines []string
	for _, c := range commands() {
		if strings.HasPrefix(c.path, noun+" ") || !isCLI(noun) {
			lines = append(lines, fmt.Sprintf("  ferry %s %s\t%s", c.path, c.args, c.help))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "commands:")
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	_ = tw.Flush()
}

// show writes v as JSON (--output json), or as the table rows make.
func (x *cli) show(v any, header string, rows func(add func(cells ...any))) error {
	if x.output == "json" {
		enc := json.NewEncoder(x.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(x.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(func(cells ...any) {
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = cell(c)
		}
		fmt.Fprintln(tw, strings.Join(s, "\t"))
	})
	return tw.Flush()
}

// cell is how a table shows one value.
func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case *string:
		if v == nil {
			return "-"
		}
		return *v
	case json.RawMessage:
		return string(v)
	case []string:
		return strings.Join(v, ",")
	case map[string]string:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + "=" + v[k]
		}
		return strings.Join(keys, ",")
	}
	return fmt.Sprint(v)
}

// fields shows one object as FIELD VALUE rows.
func (x *cli) fields(v any, pairs ...any) error {
	return x.show(v, "FIELD\tVALUE", func(add func(...any)) {
		for i := 0; i+1 < len(pairs); i += 2 {
			add(pairs[i], pairs[i+1])
		}
	})
}

// done says what a command that answers nothing did (table output only).
func (x *cli) done(format string, args ...any) error {
	if x.output == "json" {
		return nil
	}
	_, err := fmt.Fprintf(x.out, format+"\n", args...)
	return err
}
