package pgtest

import (
	"testing"
	"time"
)

func TestTmpClone(t *testing.T) {
	s := current.Load()
	rows, _ := s.admin.Query(t.Context(), "SELECT pid, datname, backend_type, state, coalesce(query,'') FROM pg_stat_activity")
	for rows.Next() {
		var pid int; var d, bt, st, q *string
		rows.Scan(&pid, &d, &bt, &st, &q)
		t.Log(pid, deref(d), deref(bt), deref(st), deref(q))
	}
	rows.Close()
	var ds []time.Duration
	for range 3 {
		name := databaseName("x")
		b := time.Now()
		_, err := s.admin.Exec(t.Context(), "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(s.template))
		if err != nil { t.Fatal(err) }
		ds = append(ds, time.Since(b).Round(time.Millisecond))
		b = time.Now()
		_, err = s.admin.Exec(t.Context(), "CREATE DATABASE "+ident(name+"b")+" TEMPLATE template1")
		if err != nil { t.Fatal(err) }
		ds = append(ds, time.Since(b).Round(time.Millisecond))
	}
	t.Logf("create tpl/template1: %v", ds)
}
func deref(s *string) string { if s == nil { return "<nil>" }; return *s }
