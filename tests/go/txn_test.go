package gotests

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionalProducer: franz-go's transactional producer
// (kgo.TransactionalID) commits and aborts transactions over three
// partitions; a read_committed consumer reads exactly the committed records,
// a read_uncommitted one every record, and neither sees a marker.
func TestTransactionalProducer(t *testing.T) {
	b := startBroker(t)
	const topic = "go-txn"
	adm, _ := b.admin(t)
	ctx := testCtx(t, 90*time.Second)
	resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("CreateTopic: %v / %v %s", err, resp.Err, resp.ErrMessage)
	}
	prod := b.client(t, kgo.DefaultProduceTopic(topic), kgo.TransactionalID("go-txn-1"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var committed, all []string
	for round := 0; round < 6; round++ {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatalf("BeginTransaction: %v", err)
		}
		for i := 0; i < 30; i++ {
			v := fmt.Sprintf("r%d-%d", round, i)
			r := &kgo.Record{Value: []byte(v), Partition: int32(i % 3)}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			all = append(all, v)
			if round%2 == 0 {
				committed = append(committed, v)
			}
		}
		end := kgo.TryCommit
		if round%2 == 1 {
			end = kgo.TryAbort
		}
		if err := prod.EndTransaction(ctx, end); err != nil {
			t.Fatalf("EndTransaction(%v): %v", end, err)
		}
	}
	got := consumeAll(ctx, t, b, topic, kgo.ReadCommitted(), len(committed))
	if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(committed)) {
		t.Fatalf("read_committed read %d records, want the %d committed ones", len(got), len(committed))
	}
	got = consumeAll(ctx, t, b, topic, kgo.ReadUncommitted(), len(all))
	if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(all)) {
		t.Fatalf("read_uncommitted read %d records, want all %d", len(got), len(all))
	}
}

func consumeAll(ctx context.Context, t *testing.T, b *broker, topic string, level kgo.IsolationLevel, want int) []string {
	t.Helper()
	cl := b.client(t, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(level),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []string
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < want && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		fetches.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	// A little longer: nothing more may come (an aborted record, a marker).
	pctx, cancel := context.WithTimeout(ctx, 1*time.Second)
	cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	cancel()
	return out
}

func sorted(v []string) []string {
	c := append([]string(nil), v...)
	sort.Strings(c)
	return c
}
