package export

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/testenv"
)

// Shards go through the stages a run's byte budget at a time, a shard
// larger than the budget counting as the whole of it: with shards of
// large messages, the stages between the producer and the assembler hold
// one at a time (bounded by windows alone, they held every shard of this
// test at once). Nor are such shards rendered before they have their
// share of the budget: the producer renders them in their turn, so the
// shards rendered and not yet assembled weigh no more than the budget
// either (rendered by their tasks, each conversation's shards were all
// rendered at once). The artifact is the same as with the default
// budget.
func TestStagesHoldBoundedBytes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		const budget = 64 << 10
		var mu sync.Mutex
		held, most, over := 0, 0, 0 // of the budget, as the semaphore counts
		live, mostLive := 0, 0      // rendered and not yet assembled, weighed the same
		weights := map[int]int{}
		hooks := Hooks{
			Rendered: func(_ string, n, size int) {
				mu.Lock()
				defer mu.Unlock()
				live += min(size, budget)
				mostLive = max(mostLive, live)
			},
			Held: func(_ string, n, size int) {
				mu.Lock()
				defer mu.Unlock()
				weights[n] = min(size, budget)
				held += weights[n]
				most = max(most, held)
				if size > budget {
					over++
				}
			},
			Assembled: func(_ string, n int) error {
				mu.Lock()
				defer mu.Unlock()
				held -= weights[n]
				live -= weights[n]
				return nil
			},
		}
		bounded := newEnv(t, db, nil, Config{ShardSize: 4}, WithHooks(hooks), withStageBytes(budget))
		ids := seedUsers(t, bounded, 2, 120)
		// 16 KiB of U+0001 renders to 96 KiB of JSON: about 390 KiB a shard.
		if err := db.Exec("UPDATE messages SET body = ?", strings.Repeat("\x01", chat.MaxBodyBytes)).Error; err != nil {
			t.Fatal(err)
		}
		v := bounded.create(chat.Actor{ID: ids[0]}, "k", "all")
		stop := bounded.start()
		got := bounded.wait(v.ID, 120*time.Second, StateDone)
		stop()
		if over < 20 {
			t.Fatalf("%d shards over the budget: the test needs many", over)
		}
		if most > budget {
			t.Fatalf("the stages held shards worth %d bytes of the %d-byte budget at once", most, budget)
		}
		if mostLive > budget {
			t.Fatalf("shards worth %d bytes of the %d-byte budget were rendered and not yet assembled at once", mostLive, budget)
		}

		free := newEnv(t, db, nil, Config{ShardSize: 4})
		w := free.create(chat.Actor{ID: ids[0]}, "k2", "all")
		free.start()
		want := free.wait(w.ID, 120*time.Second, StateDone)
		if *got.SHA256 != *want.SHA256 || *got.MessageCount != *want.MessageCount {
			t.Fatalf("artifact %s (%d messages) under the budget, %s (%d) without", *got.SHA256, *got.MessageCount, *want.SHA256, *want.MessageCount)
		}
	})
}
