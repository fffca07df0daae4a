package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ferry-mq/ferry/client"
)

func groupCommands() []command {
	return []command{
		{path: "group ls", args: "TOPIC", help: "list a topic's consumer groups with their lag", nargs: [2]int{1, 1}, setup: groupLs},
		{path: "group describe", args: "TOPIC GROUP", help: "show a group's members and per-partition lag", nargs: [2]int{2, 2}, setup: groupDescribe},
		{path: "group seek", args: "TOPIC GROUP", help: "move a group: --to earliest|latest|TIME, or --offset P=O", nargs: [2]int{2, 2}, setup: groupSeek},
	}
}

func keyCommands() []command {
	return []command{
		{path: "key ls", help: "list the API keys (never their secrets)", nargs: [2]int{0, 0}, setup: keyLs},
		{path: "key create", args: "NAME", help: "create a key: --permission RESOURCE=ACTION,... (repeatable); shows its secret once", nargs: [2]int{1, 1}, setup: keyCreate},
		{path: "key revoke", args: "ID", help: "revoke (delete) a key", nargs: [2]int{1, 1}, setup: keyRevoke},
	}
}

func groupLs(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		all, err := client.All[client.Group](ctx, client.Page{Limit: 1000}, func(ctx context.Context, p client.Page) (*client.GroupList, error) {
			return x.c.ListGroups(ctx, args[0], p)
		})
		if err != nil {
			return err
		}
		return x.show(all, "NAME\tGENERATION\tMEMBERS\tLAG", func(add func(...any)) {
			for _, g := range all {
				lag := int64(0)
				for _, p := range g.Partitions {
					lag += p.Lag
				}
				add(g.Name, g.Generation, len(g.Members), lag)
			}
		})
	}
}

func groupDescribe(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		g, err := x.c.GetGroup(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		return x.show(g, "PARTITION\tOWNER\tCOMMITTED\tHEAD\tLAG", func(add func(...any)) {
			for _, p := range g.Partitions {
				add(p.Partition, p.Owner, p.CommittedOffset, p.HeadOffset, p.Lag)
			}
		})
	}
}

func groupSeek(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	to := fs.String("to", "", "earliest, latest or an RFC 3339 time")
	var offsets list
	fs.Var(&offsets, "offset", "PARTITION=OFFSET, the next offset to read (repeatable)")
	return func(ctx context.Context, args []string) error {
		s := client.GroupSeek{To: *to, Offsets: map[int]int64{}}
		for _, o := range offsets {
			var p int
			var off int64
			if _, err := fmt.Sscanf(o, "%d=%d", &p, &off); err != nil {
				return usagef("--offset %q: want PARTITION=OFFSET", o)
			}
			s.Offsets[p] = off
		}
		if (s.To == "") == (len(s.Offsets) == 0) {
			return usagef("give --to or --offset, not both")
		}
		if err := x.c.SeekGroup(ctx, args[0], args[1], s); err != nil {
			return err
		}
		return x.done("moved group %s/%s", args[0], args[1])
	}
}

func keyLs(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, _ []string) error {
		all, err := client.All[client.Key](ctx, client.Page{Limit: 1000}, x.c.ListKeys)
		if err != nil {
			return err
		}
		return x.show(all, "ID\tNAME\tPERMISSIONS\tEXPIRES_AT\tLAST_USED_AT", func(add func(...any)) {
			for _, k := range all {
				add(k.ID, k.Name, permissions(k.Permissions), timeOrDash(k.ExpiresAt), timeOrDash(k.LastUsedAt))
			}
		})
	}
}

func permissions(ps []client.Permission) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Resource + "=" + strings.Join(p.Actions, ",")
	}
	return strings.Join(s, " ")
}

func keyCreate(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	var perms list
	fs.Var(&perms, "permission", "RESOURCE=ACTION,... e.g. queue:orders*=send,receive (repeatable)")
	return func(ctx context.Context, args []string) error {
		req := client.KeyRequest{Name: args[0]}
		for _, p := range perms {
			res, actions, ok := strings.Cut(p, "=")
			if !ok || res == "" || actions == "" {
				return usagef("--permission %q: want RESOURCE=ACTION,...", p)
			}
			req.Permissions = append(req.Permissions, client.Permission{Resource: res, Actions: strings.Split(actions, ",")})
		}
		if len(req.Permissions) == 0 {
			return usagef("give at least one --permission")
		}
		k, err := x.c.CreateKey(ctx, req)
		if err != nil {
			return err
		}
		return x.fields(k, "id", k.ID, "name", k.Name, "key", k.Secret, "permissions", permissions(k.Permissions))
	}
}

func keyRevoke(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.DeleteKey(ctx, args[0]); err != nil {
			return err
		}
		return x.done("revoked key %s", args[0])
	}
}

// timeOrDash is t in RFC 3339, or "-" when nil.
func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
