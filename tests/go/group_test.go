package gotests

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// member is one consumer-group member: it processes records, commits them
// synchronously before it lets a rebalance proceed (BlockRebalanceOnPoll), and
// records every assignment change it is told about.
type member struct {
	name string
	cl   *kgo.Client

	mu        sync.Mutex
	owned     map[int32]bool
	assigned  [][]int32 // each OnPartitionsAssigned call
	revoked   [][]int32 // each OnPartitionsRevoked call (non-empty)
	lost      [][]int32
	consumed  int
	commitErr []error
}

func (m *member) ownedSorted() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p := range m.owned {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

func sortedParts(m map[string][]int32, topic string) []int32 {
	ps := append([]int32(nil), m[topic]...)
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// TestCooperativeStickyGroup: two members of one group with the
// cooperative-sticky balancer; A joins alone and gets every partition, B joins
// and A gives up exactly half (incrementally: A keeps its others), B leaves
// mid-way and A takes B's partitions without losing any of its own. Every
// record is consumed exactly once across both members and the commits.
func TestCooperativeStickyGroup(t *testing.T) {
	b := startBroker(t)
	const (
		topic      = "go-coop"
		group      = "go-coop-group"
		partitions = 6
		batch1     = 3000
		batch2     = 3000
		total      = batch1 + batch2
	)
	adm, _ := b.admin(t)
	ctx := testCtx(t, 100*time.Second)
	if r, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("CreateTopic: %v / %v", err, r.Err)
	}
	prod := b.client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	produce := func(from, to int) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprintf("v%d", i))})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	produce(0, batch1)

	var (
		seenMu sync.Mutex
		seen   = map[int]string{} // record id -> member that processed it
		dups   []string
	)
	newMember := func(name string) *member {
		m := &member{name: name, owned: map[int32]bool{}}
		m.cl = b.client(t,
			kgo.ClientID("go-coop-"+name),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
			kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(10*time.Second),
			kgo.HeartbeatInterval(250*time.Millisecond),
			kgo.FetchMaxWait(200*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				ps := sortedParts(a, topic)
				m.mu.Lock()
				defer m.mu.Unlock()
				for _, p := range ps {
					m.owned[p] = true
				}
				if len(ps) > 0 {
					m.assigned = append(m.assigned, ps)
				}
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
				ps := sortedParts(r, topic)
				m.mu.Lock()
				defer m.mu.Unlock()
				for _, p := range ps {
					delete(m.owned, p)
				}
				if len(ps) > 0 {
					m.revoked = append(m.revoked, ps)
				}
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
				ps := sortedParts(l, topic)
				m.mu.Lock()
				defer m.mu.Unlock()
				for _, p := range ps {
					delete(m.owned, p)
				}
				if len(ps) > 0 {
					m.lost = append(m.lost, ps)
				}
			}),
		)
		return m
	}
	// run polls small batches, processes them, commits them synchronously, and
	// only then allows a rebalance.
	run := func(m *member, stop <-chan struct{}, done chan<- struct{}) {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			fs := m.cl.PollRecords(pctx, 40)
			cancel()
			if m.cl.Context().Err() != nil {
				return
			}
			var recs []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
			for _, r := range recs {
				id, _ := strconv.Atoi(string(r.Key))
				seenMu.Lock()
				if prev, ok := seen[id]; ok {
					dups = append(dups, fmt.Sprintf("record %d (p%d@%d) by %s, before by %s", id, r.Partition, r.Offset, m.name, prev))
				}
				seen[id] = m.name
				seenMu.Unlock()
			}
			if len(recs) > 0 {
				if err := m.cl.CommitRecords(ctx, recs...); err != nil {
					m.mu.Lock()
					m.commitErr = append(m.commitErr, err)
					m.mu.Unlock()
				}
				m.mu.Lock()
				m.consumed += len(recs)
				m.mu.Unlock()
				time.Sleep(25 * time.Millisecond) // slow enough that hand-overs happen mid-data
			}
			m.cl.AllowRebalance()
		}
	}
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	all := []int32{0, 1, 2, 3, 4, 5}

	a := newMember("A")
	stopA, doneA := make(chan struct{}), make(chan struct{})
	go run(a, stopA, doneA)
	waitFor("A to own all partitions", 30*time.Second, func() bool { return fmt.Sprint(a.ownedSorted()) == fmt.Sprint(all) })

	bm := newMember("B")
	stopB, doneB := make(chan struct{}), make(chan struct{})
	go run(bm, stopB, doneB)
	waitFor("A and B to own 3 partitions each", 30*time.Second, func() bool {
		return len(a.ownedSorted()) == 3 && len(bm.ownedSorted()) == 3
	})
	aHalf, bHalf := a.ownedSorted(), bm.ownedSorted()
	union := map[int32]bool{}
	for _, p := range append(append([]int32{}, aHalf...), bHalf...) {
		union[p] = true
	}
	if len(union) != partitions {
		t.Fatalf("A owns %v and B owns %v: not a partition of %v", aHalf, bHalf, all)
	}
	a.mu.Lock()
	if fmt.Sprint(a.revoked) != fmt.Sprint([][]int32{bHalf}) {
		t.Errorf("A's revocations when B joined: %v, want exactly B's partitions %v once (cooperative)", a.revoked, bHalf)
	}
	a.mu.Unlock()

	// The group as the coordinator sees it: Stable, two members, cooperative-sticky.
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeGroups: %v", err)
	}
	g := dg[group]
	if g.Err != nil || g.State != "Stable" || g.ProtocolType != "consumer" || g.Protocol != "cooperative-sticky" || len(g.Members) != 2 {
		t.Errorf("DescribeGroups = state %q type %q protocol %q members %d err %v; want Stable consumer cooperative-sticky 2", g.State, g.ProtocolType, g.Protocol, len(g.Members), g.Err)
	}

	produce(batch1, total)

	// B leaves mid-way: after it has processed some of its share of batch 2.
	bStart := func() int { bm.mu.Lock(); defer bm.mu.Unlock(); return bm.consumed }()
	waitFor("B to process records of the second batch", 30*time.Second, func() bool {
		bm.mu.Lock()
		defer bm.mu.Unlock()
		return bm.consumed >= bStart+200
	})
	close(stopB)
	<-doneB
	bm.cl.Close() // commits nothing more (autocommit off), sends LeaveGroup
	bm.mu.Lock()
	bConsumed := bm.consumed
	bm.mu.Unlock()
	if bConsumed >= total/2 {
		t.Fatalf("B consumed %d records before leaving, not mid-way", bConsumed)
	}

	waitFor("A to own all partitions again", 30*time.Second, func() bool { return fmt.Sprint(a.ownedSorted()) == fmt.Sprint(all) })
	a.mu.Lock()
	if len(a.revoked) != 1 {
		t.Errorf("A's revocations: %v; after B left A must not have given anything up", a.revoked)
	}
	if len(a.lost) != 0 {
		t.Errorf("A lost partitions %v", a.lost)
	}
	a.mu.Unlock()

	waitFor("every record to be consumed", 60*time.Second, func() bool {
		seenMu.Lock()
		defer seenMu.Unlock()
		return len(seen) >= total || len(dups) > 0
	})
	close(stopA)
	<-doneA

	seenMu.Lock()
	if len(dups) > 0 {
		t.Errorf("%d records consumed twice, e.g. %v", len(dups), dups[:min(5, len(dups))])
	}
	for i := 0; i < total; i++ {
		if _, ok := seen[i]; !ok {
			t.Errorf("record %d never consumed", i)
			break
		}
	}
	var byA, byB, bBatch1 int
	for id, who := range seen {
		if who == "A" {
			byA++
		} else {
			byB++
			if id < batch1 {
				bBatch1++
			}
		}
	}
	seenMu.Unlock()
	t.Logf("A consumed %d, B consumed %d (%d of the first batch, which A had started on); A assignments %v revocations %v; B assignments %v", byA, byB, bBatch1, a.assigned, a.revoked, bm.assigned)
	if bBatch1 == 0 {
		t.Errorf("B consumed none of the first batch: A had drained it before B joined, the hand-over of partitions with data left was not exercised")
	}
	for _, m := range []*member{a, bm} {
		if len(m.commitErr) > 0 {
			t.Errorf("%s commit errors: %v", m.name, m.commitErr)
		}
	}

	// The committed offsets are the end offsets of every partition.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("ListEndOffsets: %v", err)
	}
	fo, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets: %v", err)
	}
	for _, p := range all {
		end, _ := ends.Lookup(topic, p)
		if end.Offset != total/partitions {
			t.Errorf("end offset of %d = %d want %d", p, end.Offset, total/partitions)
		}
		c, ok := fo.Lookup(topic, p)
		if !ok || c.Err != nil || c.At != end.Offset {
			t.Errorf("committed offset of partition %d = %+v, want %d", p, c, end.Offset)
		}
	}

	dg, err = adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeGroups: %v", err)
	}
	g = dg[group]
	if g.State != "Stable" || len(g.Members) != 1 || g.Protocol != "cooperative-sticky" {
		t.Errorf("after B left: state %q members %d protocol %q; want Stable 1 cooperative-sticky", g.State, len(g.Members), g.Protocol)
	} else {
		if ca, ok := g.Members[0].Assigned.AsConsumer(); !ok || len(ca.Topics) != 1 || len(ca.Topics[0].Partitions) != partitions {
			t.Errorf("A's assignment per the coordinator: %+v", ca)
		}
		if g.Members[0].ClientID != "go-coop-A" {
			t.Errorf("remaining member client id %q want go-coop-A", g.Members[0].ClientID)
		}
	}
}
