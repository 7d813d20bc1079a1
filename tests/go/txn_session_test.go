package gotests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupTransactSession: franz-go's consume-transform-produce session
// (kgo.GroupTransactSession) copies a known input to an output topic, every
// third transaction aborted. An abort rewinds the session to the group's
// committed offsets, so the output read with read_committed holds each input
// record exactly once, and the group's committed offsets, written in the
// transactions, end at the input's end.
func TestGroupTransactSession(t *testing.T) {
	runGroupTransactSession(t, "go-eos")
}

// TestGroupTransactSessionConsumerProtocol: the same with the KIP-848 consumer
// protocol (ServerSideBalancer): the session's TxnOffsetCommits name a
// consumer-protocol member and its epoch, which the coordinator checks against
// the consumer group (UNKNOWN_MEMBER_ID for every commit once made the session
// abort and retry forever). Every transaction must commit or abort as asked.
func TestGroupTransactSessionConsumerProtocol(t *testing.T) {
	runGroupTransactSession(t, "go-eos848", kgo.ServerSideBalancer(),
		kgo.Balancers(kgo.RangeBalancer()))
}

func runGroupTransactSession(t *testing.T, prefix string, groupOpts ...kgo.Opt) {
	b := startBroker(t)
	src, dst, group := prefix+"-in", prefix+"-out", prefix+"-group"
	const n = 300
	adm, _ := b.admin(t)
	ctx := testCtx(t, 120*time.Second)
	for _, topic := range []string{src, dst} {
		resp, err := adm.CreateTopic(ctx, 2, 1, nil, topic)
		if err != nil || resp.Err != nil {
			t.Fatalf("CreateTopic %s: %v / %v %s", topic, err, resp.Err, resp.ErrMessage)
		}
	}
	plain := b.client(t, kgo.DefaultProduceTopic(src))
	for i := 0; i < n; i++ {
		if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i))}).FirstErr(); err != nil {
			t.Fatalf("produce input %d: %v", i, err)
		}
	}

	opts := append([]kgo.Opt{
		kgo.SeedBrokers(b.addr),
		kgo.RetryTimeout(20 * time.Second),
		kgo.TransactionalID(prefix + "-tx"),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(src),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.DefaultProduceTopic(dst),
	}, groupOpts...)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		t.Fatalf("NewGroupTransactSession: %v", err)
	}
	defer sess.Close()

	committedInputs := 0
	aborted, failedCommits := 0, 0
	deadline := time.Now().Add(90 * time.Second)
	for txn := 0; committedInputs < n; txn++ {
		if time.Now().After(deadline) {
			t.Fatalf("copied %d of %d inputs after %d transactions", committedInputs, n, txn)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fetches := sess.PollRecords(pctx, 40)
		cancel()
		if errs := fetches.Errors(); len(errs) > 0 && ctx.Err() == nil {
			for _, e := range errs {
				if e.Err != context.DeadlineExceeded {
					t.Fatalf("poll: %v", e.Err)
				}
			}
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("Begin: %v", err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			out := &kgo.Record{Value: append([]byte("x-"), r.Value...)}
			if err := sess.ProduceSync(ctx, out).FirstErr(); err != nil {
				t.Fatalf("produce output: %v", err)
			}
		})
		abort := txn%3 == 2
		end := kgo.TryCommit
		if abort {
			end = kgo.TryAbort
		}
		done, err := sess.End(ctx, end)
		if err != nil {
			t.Fatalf("End(%v): %v", end, err)
		}
		if abort {
			aborted++
		} else if done {
			committedInputs += fetches.NumRecords()
		} else {
			failedCommits++
		}
	}
	if aborted == 0 {
		t.Fatalf("no transaction was aborted")
	}
	// The group is of the protocol the session asked for.
	wantType := "classic"
	if len(groupOpts) > 0 {
		wantType = "consumer"
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if g, ok := listed[group]; !ok || g.GroupType != wantType {
		t.Fatalf("group %s listed as %+v, want type %s", group, g, wantType)
	}
	// A commit the session had to abort is one the broker refused (no member
	// changes here: one member, no rebalance).
	if failedCommits > 0 {
		t.Fatalf("%d commits were turned into aborts", failedCommits)
	}

	got := consumeAll(ctx, t, b, dst, kgo.ReadCommitted(), n)
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for i := 0; i < n; i++ {
		if c := seen[fmt.Sprintf("x-v%d", i)]; c != 1 {
			t.Fatalf("output x-v%d read %d times (read %d records)", i, c, len(got))
		}
	}
	if len(got) != n {
		t.Fatalf("read_committed read %d records, want %d", len(got), n)
	}
	offsets, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets: %v", err)
	}
	var total int64
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			t.Fatalf("offset of %s-%d: %v", o.Topic, o.Partition, o.Err)
		}
		total += o.At
	})
	if total != n {
		t.Fatalf("the group's committed offsets add up to %d, want %d", total, n)
	}
}
