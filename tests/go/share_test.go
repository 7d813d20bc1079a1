package gotests

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// setGroupConfigs sets a group's own configs (ConfigResource type GROUP, 32), as
// kafka-configs --entity-type groups does; kadm has no call for it.
func setGroupConfigs(t *testing.T, ctx context.Context, cl *kgo.Client, group string, kv map[string]string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for k, v := range kv {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = k
		c.Value = kmsg.StringPtr(v)
		c.Op = kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("IncrementalAlterConfigs: %v", err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("IncrementalAlterConfigs %s: %v (%s)", group, err, strp(r.ErrorMessage))
		}
	}
}

// TestShareGroup runs franz-go's share consumer (kgo.ShareGroup, KIP-932) against
// corelog: two members read one partition, every tenth record is rejected and every
// tenth other released at its first delivery; every other record is accepted exactly
// once, the released ones at their second delivery, and both members take part. Then
// kadm's share-group admin: DescribeShareGroups, DescribeShareGroupOffsets (the start
// offset past everything settled) and FindShareCoordinators (FindCoordinator v6).
func TestShareGroup(t *testing.T) {
	b := startBroker(t, "--group-share-session-timeout-ms", "6000", "--group-share-heartbeat-interval-ms", "500")
	const (
		topic = "go-share"
		group = "go-share-group"
		n     = 300
	)
	adm, admCl := b.admin(t)
	ctx := testCtx(t, 120*time.Second)
	created, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if err != nil || created.Err != nil {
		t.Fatalf("CreateTopic: %v / %v", err, created.Err)
	}
	setGroupConfigs(t, ctx, admCl, group, map[string]string{"share.auto.offset.reset": "earliest"})

	var (
		mu       sync.Mutex
		accepted = map[int]int{}   // record -> times accepted
		second   = map[int]int32{} // released record -> delivery count when accepted
		rejected = map[int]bool{}
		per      [2]int
		ackErrs  []string
	)
	done := make(chan struct{})
	member := func(i int) {
		cl := b.client(t,
			kgo.ClientID(fmt.Sprintf("go-share-%d", i)),
			kgo.ShareGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.ShareMaxRecords(20),
			kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
				if err := rs.Error(); err != nil {
					mu.Lock()
					ackErrs = append(ackErrs, err.Error())
					mu.Unlock()
				}
			}),
		)
		for {
			select {
			case <-done:
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			fs.EachError(func(_ string, _ int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					mu.Lock()
					ackErrs = append(ackErrs, "fetch: "+err.Error())
					mu.Unlock()
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				id, _ := strconv.Atoi(string(r.Value))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case id%10 == 3:
					r.Ack(kgo.AckReject)
					rejected[id] = true
				case id%10 == 7 && r.DeliveryCount() == 1:
					r.Ack(kgo.AckRelease)
				default:
					r.Ack(kgo.AckAccept)
					accepted[id]++
					if id%10 == 7 {
						second[id] = r.DeliveryCount()
					}
					per[i]++
				}
			})
			if err := cl.FlushAcks(ctx); err != nil {
				mu.Lock()
				ackErrs = append(ackErrs, "flush: "+err.Error())
				mu.Unlock()
			}
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); member(i) }()
	}
	// Both members in the group, each assigned the partition, before the records come:
	// records produced earlier could all go to the first to join.
	joined := time.Now().Add(60 * time.Second)
	for {
		d, err := adm.DescribeShareGroups(ctx, group)
		g := d[group]
		assigned := 0
		for _, m := range g.Members {
			if len(m.Assignment) > 0 {
				assigned++
			}
		}
		if err == nil && g.Err == nil && assigned == 2 {
			break
		}
		if time.Now().After(joined) {
			close(done)
			wg.Wait()
			t.Fatalf("two members assigned: err %v, group %+v", err, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
	prod := b.client(t, kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	want := n - n/10
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		got := len(accepted)
		mu.Unlock()
		if got >= want {
			break
		}
		if time.Now().After(deadline) {
			close(done)
			wg.Wait()
			t.Fatalf("accepted %d of %d; ack errors %v", got, want, ackErrs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Both members are in the group while it is described.
	described, err := adm.DescribeShareGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeShareGroups: %v", err)
	}
	g := described[group]
	if g.Err != nil || g.GroupState != "Stable" || len(g.Members) != 2 {
		t.Errorf("DescribeShareGroups: err %v, state %q, %d members", g.Err, g.GroupState, len(g.Members))
	}
	close(done)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(ackErrs) > 0 {
		t.Errorf("acknowledgement errors: %v", ackErrs)
	}
	for id, times := range accepted {
		if times != 1 {
			t.Errorf("record %d accepted %d times", id, times)
		}
		if rejected[id] {
			t.Errorf("record %d both rejected and accepted", id)
		}
	}
	if len(rejected) != n/10 || len(second) != n/10 {
		t.Errorf("rejected %d, released-then-accepted %d; want %d each", len(rejected), len(second), n/10)
	}
	for id, dc := range second {
		if dc != 2 {
			t.Errorf("released record %d accepted at delivery %d, want 2", id, dc)
		}
	}
	if per[0] == 0 || per[1] == 0 {
		t.Errorf("both members take part: %v", per)
	}

	// Everything is settled: the share-partition start offset is past the last record.
	offsets, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		t.Fatalf("DescribeShareGroupOffsets: %v", err)
	}
	so, ok := offsets[group].Offsets.Lookup(topic, 0)
	if offsets[group].Err != nil || !ok || so.Err != nil || so.StartOffset != n {
		t.Errorf("DescribeShareGroupOffsets: group err %v, found %v, %+v; want start offset %d",
			offsets[group].Err, ok, so, n)
	}

	// The share coordinator of the partition: this broker (the only one).
	key := fmt.Sprintf("%s:%s:0", group, base64.RawURLEncoding.EncodeToString(so.TopicID[:]))
	coords := adm.FindShareCoordinators(ctx, key)
	c, ok := coords[key]
	if !ok || c.Err != nil || c.NodeID != 0 || c.Port != b.port {
		t.Errorf("FindShareCoordinators(%s): %+v", key, c)
	}
	bad := adm.FindShareCoordinators(ctx, "no-topic-id")
	if !errors.Is(bad["no-topic-id"].Err, kerr.InvalidRequest) {
		t.Errorf("a malformed share coordinator key: %+v", bad["no-topic-id"])
	}
}
