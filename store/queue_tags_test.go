package store_test

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestQueueTagsChange: concurrent changes of different keys all hold (no
// lost update); a change past store.MaxQueueTags writes nothing; a queue
// that does not exist is ErrNotFound; tags leave updated_at alone.
func TestQueueTagsChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("tagged", store.QueuePatch{Tags: ptr(map[string]string{"keep": "me", "drop": "me"})})

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			set := map[string]string{fmt.Sprintf("k%d", i): "v"}
			var remove []string
			if i == 0 {
				remove = []string{"drop"}
			}
			require.NoError(t, store.QueueTagsChange(e.ctx, e.db, "tagged", set, remove))
		}()
	}
	wg.Wait()
	got, err := store.QueueGet(e.ctx, e.pool, "tagged")
	require.NoError(t, err)
	want := map[string]string{"keep": "me"}
	for i := range 20 {
		want[fmt.Sprintf("k%d", i)] = "v"
	}
	require.Equal(t, want, got.Tags)
	require.Equal(t, q.UpdatedAt, got.UpdatedAt)

	more := map[string]string{}
	for i := range 30 {
		more[fmt.Sprintf("m%d", i)] = "v"
	}
	err = store.QueueTagsChange(e.ctx, e.db, "tagged", more, nil)
	var verr *store.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "tags", verr.Field)
	again, err := store.QueueGet(e.ctx, e.pool, "tagged")
	require.NoError(t, err)
	require.True(t, maps.Equal(want, again.Tags), "a refused change writes nothing")
	require.ErrorIs(t, store.QueueTagsChange(e.ctx, e.db, "nope", more, nil), store.ErrNotFound)
}
