package multihost

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Fault helpers for the goroutine that runs beside a job (t.Errorf, never t.Fatal, there).

func (j *job) try(args ...string) bool {
	if _, err := docker(args...); err != nil {
		j.t.Errorf("%v", err)
		return false
	}
	return true
}

// sample reads a pod's /metrics without failing the test (nil when it does not answer).
func (j *job) sample(p *pod) map[string]float64 {
	m, err := j.scrape(p)
	if err != nil {
		return nil
	}
	return m
}

// leader is the controller member whose adam_controller_is_leader is 1 (nil: none now).
func (j *job) leader() *pod {
	for _, p := range j.pods {
		if p.role == "controller" {
			if m := j.sample(p); m != nil && m["adam_controller_is_leader"] == 1 {
				return p
			}
		}
	}
	return nil
}

func (j *job) waitLeader(except *pod, limit time.Duration) (*pod, time.Duration) {
	start := time.Now()
	for time.Since(start) < limit {
		if l := j.leader(); l != nil && l != except {
			return l, time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, limit
}

// primary is the parameter server that is primary for the most shards now.
func (j *job) primaryServer() *pod {
	var best *pod
	most := 0.0
	for _, p := range j.pods {
		if p.role == "ps" {
			if m := j.sample(p); m != nil && m["adam_ps_primary_shards"] > most {
				best, most = p, m["adam_ps_primary_shards"]
			}
		}
	}
	return best
}

// failovers counts the controller members' failover events naming a parameter server index.
func (j *job) failovers(dead int) int {
	n := 0
	for _, p := range j.pods {
		if p.role != "controller" {
			continue
		}
		for _, ev := range j.events(p, "failover") {
			list, _ := ev["dead"].([]any)
			for _, d := range list {
				if f, ok := d.(float64); ok && int(f) == dead {
					n++
				}
			}
		}
	}
	return n
}

func psIndex(p *pod) int {
	i, _ := strconv.Atoi(p.name[strings.LastIndex(p.name, "-")+1:])
	return i
}

// waitFailover waits for a committed failover of the server (its shards given to other copies).
func (j *job) waitFailover(p *pod, before int, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < limit {
		if j.failovers(psIndex(p)) > before {
			return time.Since(start), true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return limit, false
}

// cut drops, inside p's network namespace, every packet to and from the given pods' addresses
// on the pod network (iptables from the tools image; the pod itself keeps no capability).
func (j *job) cut(p *pod, from []*pod) bool {
	var rules []string
	for _, o := range from {
		ip := j.address(o, j.primary)
		rules = append(rules, fmt.Sprintf("iptables -A INPUT -s %s -j DROP && iptables -A OUTPUT -d %s -j DROP", ip, ip))
	}
	j.logf("partition: %s cut off from %s", p.name, names(from))
	return j.inNetns(p, strings.Join(rules, " && "))
}

// heal removes every rule cut or the second-network cut added.
func (j *job) heal(p *pod) bool {
	j.logf("partition of %s healed", p.name)
	return j.inNetns(p, "iptables -F")
}

// inNetns runs a shell script in p's network namespace, from the tools image, with the
// NET_ADMIN capability the pod itself lacks.
func (j *job) inNetns(p *pod, script string) bool {
	return j.try("run", "--rm", "--network", "container:"+p.container, "--cap-add", "NET_ADMIN",
		"--label", "dev.adam.multihost="+j.prefix, os.Getenv("ADAM_TOOLS_IMAGE"), "sh", "-c", script)
}

func names(ps []*pod) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.name)
	}
	return strings.Join(s, ", ")
}

func (j *job) role(role string) []*pod {
	var out []*pod
	for _, p := range j.pods {
		if p.role == role {
			out = append(out, p)
		}
	}
	return out
}

// settle lets the job train for `d` between faults.
func (j *job) settle(d time.Duration) { time.Sleep(d) }

// waitMetric samples p's metric every 100 ms until `ok` holds for it or `limit` has passed:
// the last value read, how long it took, and whether it held.
func (j *job) waitMetric(p *pod, name string, ok func(float64) bool,
	limit time.Duration) (float64, time.Duration, bool) {
	start := time.Now()
	var v float64
	for {
		if m := j.sample(p); m != nil {
			var have bool
			if v, have = m[name]; have && ok(v) {
				return v, time.Since(start), true
			}
		}
		if time.Since(start) >= limit {
			return v, time.Since(start), false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Parameter-server faults, one after another in one HA job, each given time to heal: the
// primary killed (and its pod back 5 s later), a primary paused 3 s, a primary cut off from
// every controller member but not from the trainers, and a server's second network cut.
func TestParameterServerFaultsAcrossHosts(t *testing.T) {
	j := newJob(t, "fashion-mnist-ha", edit{"epochs", strconv.Itoa(faultEpochs)})
	var figures []string
	j.run(10*time.Minute, func() {
		j.settle(8 * time.Second)

		// 1. docker kill of the primary.
		p := j.primaryServer()
		if p == nil {
			j.t.Errorf("no parameter server reports primary shards")
			return
		}
		before := j.failovers(psIndex(p))
		j.kill(p)
		took, ok := j.waitFailover(p, before, 20*time.Second)
		if !ok {
			j.t.Errorf("no failover of %s within 20 s of its kill", p.name)
		}
		figures = append(figures, fmt.Sprintf("kill of primary %s: failover committed %.2f s after", p.name, took.Seconds()))
		j.restart(p, 5*time.Second)
		j.settle(6 * time.Second)

		// 2. docker pause of a primary for 3 s: replaced meanwhile, it must not take a write as
		// primary once it runs again, before it has learnt the new shard map.
		p = j.primaryServer()
		if p == nil {
			j.t.Errorf("no primary after the restart")
			return
		}
		before = j.failovers(psIndex(p))
		j.logf("docker pause %s for 3 s", p.name)
		if !j.try("pause", p.container) {
			return
		}
		took, ok = j.waitFailover(p, before, 3*time.Second)
		time.Sleep(3*time.Second - took)
		j.try("unpause", p.container)
		j.logf("docker unpause %s", p.name)
		if !ok {
			j.t.Errorf("%s was paused 3 s and not replaced", p.name)
		}
		figures = append(figures, fmt.Sprintf("pause of primary %s for 3 s: failover committed %.2f s after", p.name, took.Seconds()))
		j.checkNoStaleWrites(p)
		j.settle(6 * time.Second)

		// 3. A primary cut off from every controller member, not from the trainers.
		p = j.primaryServer()
		if p == nil {
			j.t.Errorf("no primary after the pause")
			return
		}
		before = j.failovers(psIndex(p))
		if !j.cut(p, j.role("controller")) {
			return
		}
		took, ok = j.waitFailover(p, before, 10*time.Second)
		if !ok {
			j.t.Errorf("%s, cut off from the controllers, was not replaced in 10 s", p.name)
		}
		figures = append(figures, fmt.Sprintf("primary %s cut off from the controllers: failover committed %.2f s after", p.name, took.Seconds()))
		// Its lease ran out: it takes no write while the trainers still reach it.
		time.Sleep(time.Second)
		mid := j.sample(p)
		time.Sleep(2 * time.Second)
		after := j.sample(p)
		if mid == nil || after == nil {
			j.t.Errorf("%s, cut off from the controllers, does not answer /metrics", p.name)
		} else if after["adam_ps_push_bytes_total"] > mid["adam_ps_push_bytes_total"] {
			j.t.Errorf("%s applied %.0f pushed bytes while cut off from the controllers, after its failover",
				p.name, after["adam_ps_push_bytes_total"]-mid["adam_ps_push_bytes_total"])
		}
		j.heal(p)
		j.settle(6 * time.Second)

		// 4. A server's second network cut for 5 s (every packet on that interface dropped; its
		// address stays): its copies fall behind, then catch up.
		p = j.primaryServer()
		if p == nil {
			j.t.Errorf("no primary after the partition")
			return
		}
		ip := j.address(p, j.replication)
		j.logf("second network of %s cut", p.name)
		if !j.inNetns(p, `i=$(ip -o -4 addr show | awk -v ip=`+ip+` 'index($4, ip"/")==1 {print $2}'); [ -n "$i" ] && iptables -A INPUT -i $i -j DROP && iptables -A OUTPUT -o $i -j DROP`) {
			return
		}
		time.Sleep(5 * time.Second)
		lagged := false
		for _, q := range j.role("ps") {
			if m := j.sample(q); m != nil && m["adam_ps_replication_lag_seconds"] > 0 {
				lagged = true
			}
		}
		if !lagged {
			j.t.Errorf("no copy fell behind while the second network of %s was cut", p.name)
		}
		j.heal(p)
		start := time.Now()
		for time.Since(start) < 20*time.Second {
			behind := 0
			for _, q := range j.role("ps") {
				if m := j.sample(q); m == nil || m["adam_ps_replication_lag_seconds"] > 0 {
					behind++
				}
			}
			if behind == 0 {
				figures = append(figures, fmt.Sprintf("second network of %s cut 5 s (its copies fell behind: %v): every copy current %.2f s after it came back",
					p.name, lagged, time.Since(start).Seconds()))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if time.Since(start) >= 20*time.Second {
			j.t.Errorf("copies still behind 20 s after the second network of %s came back", p.name)
		}
		for _, f := range figures {
			j.logf("%s", f)
		}
	})
	checkAccuracy(t, j, faultEpochs)
	checkEpochs(t, j, faultEpochs)
	for _, f := range figures {
		t.Log(f)
	}
}

// checkNoStaleWrites: after a pause, the server's pushed bytes must not grow before its shard
// map version has reached the leader's (it would be a primary nobody else knows of), and it must
// reach it within 5 s.
func (j *job) checkNoStaleWrites(p *pod) {
	var want float64
	if l := j.leader(); l == nil {
		j.t.Errorf("no controller leader to compare %s's shard map with", p.name)
		return
	} else if lm := j.sample(l); lm == nil {
		j.t.Errorf("the controller leader %s does not answer /metrics", l.name)
		return
	} else {
		want = lm["adam_controller_map_version"]
	}
	start := time.Now()
	var first map[string]float64
	for time.Since(start) < 5*time.Second {
		m := j.sample(p)
		if m == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if first == nil {
			first = m
		}
		if pushed := m["adam_ps_push_bytes_total"] - first["adam_ps_push_bytes_total"]; pushed > 0 &&
			m["adam_ps_shard_map_version"] < want {
			j.t.Errorf("%s applied %.0f pushed bytes after its pause on shard map %v, behind the leader's %v",
				p.name, pushed, m["adam_ps_shard_map_version"], want)
			return
		}
		if m["adam_ps_shard_map_version"] >= want {
			j.logf("%s caught up with shard map %v %.2f s after its pause", p.name, want, time.Since(start).Seconds())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	j.t.Errorf("%s did not reach the leader's shard map %v within 5 s of its pause", p.name, want)
}

// Controller faults in one HA job: the leader killed (back 5 s later), then the leader cut off
// from its peers (not from the servers) for 6 s.
func TestControllerFaultsAcrossHosts(t *testing.T) {
	j := newJob(t, "fashion-mnist-ha", edit{"epochs", strconv.Itoa(faultEpochs)})
	var figures []string
	j.run(10*time.Minute, func() {
		j.settle(8 * time.Second)
		l := j.leader()
		if l == nil {
			j.t.Errorf("no controller leader")
			return
		}
		j.kill(l)
		next, took := j.waitLeader(l, 15*time.Second)
		if next == nil {
			j.t.Errorf("no new controller leader within 15 s of killing %s", l.name)
			return
		}
		figures = append(figures, fmt.Sprintf("kill of controller leader %s: %s led %.2f s after", l.name, next.name, took.Seconds()))
		j.restart(l, 5*time.Second)
		j.settle(6 * time.Second)

		l = j.leader()
		if l == nil {
			j.t.Errorf("no controller leader after the restart")
			return
		}
		var peers []*pod
		for _, p := range j.role("controller") {
			if p != l {
				peers = append(peers, p)
			}
		}
		if !j.cut(l, peers) {
			return
		}
		next, took = j.waitLeader(l, 15*time.Second)
		if next == nil {
			j.t.Errorf("no new controller leader within 15 s of cutting %s off from its peers", l.name)
		} else {
			figures = append(figures, fmt.Sprintf("controller leader %s cut off from its peers: %s led %.2f s after", l.name, next.name, took.Seconds()))
		}
		// The old leader must not still call itself leader once a majority elected another.
		time.Sleep(2 * time.Second)
		if m := j.sample(l); m != nil && m["adam_controller_is_leader"] == 1 {
			j.t.Errorf("%s still says it leads, 2 s after %v was elected without it", l.name, next)
		}
		time.Sleep(4 * time.Second)
		j.heal(l)
	})
	checkAccuracy(t, j, faultEpochs)
	checkEpochs(t, j, faultEpochs)
	for _, f := range figures {
		t.Log(f)
	}
}

// Worker faults in the demo (no copies) with two data-server replicas: data-server-0 killed for
// good (trainer 0, which used it, goes on with data-server-1), then data-server-1 killed and back
// 3 s later (no replica answers meanwhile: the trainers wait for it), then trainer 1, then
// trainer 0, each killed and back 3 s later, as the operator replaces pods (trainer 0 starts
// again while its own replica is gone).
func TestWorkerFaultsAcrossHosts(t *testing.T) {
	j := newJob(t, "fashion-mnist", edit{"epochs", strconv.Itoa(workerFaultEpochs)},
		edit{"dataServer", "{replicas: 2}"})
	j.run(10*time.Minute, func() {
		j.settle(8 * time.Second)
		// Trainer 0's own replica is data-server-0. It is killed once trainer 0 trains from it, so
		// that the move is the one made at a call (a trainer that starts while its replica is down
		// starts with the next one: AdamRun.ADataServerReplicaLostForGoodDoesNotEndTheJob). A call
		// in flight when the container dies gets no answer at all (no reset comes back), so the
		// move comes with the data client's answer timeout (5 s); within 10 s, then.
		if _, _, ok := j.waitMetric(j.trainer(0), "adam_trainer_images_total",
			func(v float64) bool { return v > 0 }, time.Minute); !ok {
			j.t.Errorf("trainer-0 trained no image within a minute")
		}
		if p := j.pod("data-server-0"); j.running(p) {
			before := j.sample(j.trainer(0))
			j.kill(p)
			if _, took, ok := j.waitMetric(j.trainer(0), "adam_trainer_data_server_in_use",
				func(v float64) bool { return v == 1 }, 10*time.Second); ok {
				j.logf("trainer-0 on data-server-1 %.1f s after data-server-0's kill (in use before it: %v)",
					took.Seconds(), before["adam_trainer_data_server_in_use"])
			} else {
				j.t.Errorf("trainer-0 did not move to data-server-1 within 10 s of data-server-0's kill")
			}
			if m := j.sample(j.trainer(0)); m == nil {
				j.t.Errorf("trainer-0's /metrics could not be read")
			} else if before["adam_trainer_data_server_in_use"] == 0 && m["adam_trainer_data_server_switches_total"] != 1 {
				j.t.Errorf("trainer-0's data_server_switches_total is %v, not 1",
					m["adam_trainer_data_server_switches_total"])
			}
		}
		for _, name := range []string{"data-server-1", "trainer-1", "trainer-0"} {
			j.settle(8 * time.Second)
			p := j.pod(name)
			if !j.running(p) {
				j.logf("%s already ended", name)
				continue
			}
			j.mu.Lock()
			j.restarts[p.name] = true
			j.mu.Unlock()
			j.kill(p)
			j.restart(p, 3*time.Second)
		}
	})
	checkResult(t, j, workerFaultEpochs, false)
	checkEpochs(t, j, workerFaultEpochs)
}
