package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestOpenRacingCreators: processes that open a new database at once (the
// reconciler's service and a command, on a fresh install) all open it;
// none is told the database is locked (prepare tries again). The fresh-
// clone CI's Grid Engine test lost its first sync to it ("open store …:
// database is locked"). Without prepare's retry this test fails at its
// first or second try; six processes creating one database at once
// failed in 4 of 150 tries.
func TestOpenRacingCreators(t *testing.T) {
	ctx := context.Background()
	for i := range 150 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("race%d.db", i))
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Go(func() {
				db, err := Open(ctx, path, Options{})
				if err != nil {
					errs <- err
					return
				}
				db.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("try %d: %v", i, err)
		}
	}
}
