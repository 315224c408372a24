package serve

import (
	"fmt"
	"time"
)

// clusterFacts are what placement knows of one cluster when a batch of rows
// is placed (gathered by clusters.go; place decides from them alone).
type clusterFacts struct {
	Name string
	// Up is false while the cluster does not answer (its last room probe or
	// submission failed to reach it): it gets no new rows.
	Up bool
	// InFlight are this serve's episodes on it; MaxInFlight its bound
	// (clusters[].max_in_flight, 0: none).
	InFlight, MaxInFlight int
	// Known says the room below was read (sinfo, squeue); unknown room is
	// taken as none free and nothing pending.
	Known bool
	// FreeGPUs of the cluster's GRES type, Pending jobs in its partition.
	FreeGPUs, Pending int
	// Wait is the recent queue wait of this serve's GPU jobs there (0:
	// none seen yet: DefaultWait stands in).
	Wait time.Duration
}

// defaultWait stands in for a cluster's queue wait until one is seen.
const defaultWait = time.Minute

// placement is where place put each row (an index into the facts, -1 for a
// row no cluster can take now) and, per cluster, why in one line.
type placement struct {
	Cluster []int
	Why     []string
}

// place puts n rows on the clusters that are up and under their bound.
// Each row goes where it is expected to start soonest: a cluster with a
// free GPU not yet claimed (free GPUs, less the jobs pending there and the
// rows this batch already put there) starts it now, the most room first;
// else the row waits behind the cluster's deficit, each place in line
// costing the cluster's recent queue wait, and the shortest expected wait
// wins. Ties go to the cluster with fewer of this serve's episodes, then
// to the config's order. A pure function of the facts (table-tested).
func place(facts []clusterFacts, n int) placement {
	p := placement{Cluster: make([]int, n), Why: make([]string, len(facts))}
	added := make([]int, len(facts))
	for r := range n {
		best, bestWait, bestRoom := -1, time.Duration(0), 0
		for i, f := range facts {
			if !f.Up || (f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight) {
				continue
			}
			room := f.FreeGPUs - f.Pending - added[i]
			if !f.Known {
				room = -added[i]
			}
			wait := time.Duration(0)
			if room <= 0 {
				w := f.Wait
				if w <= 0 {
					w = defaultWait
				}
				wait = time.Duration(1-room) * w
			}
			better := best < 0 || wait < bestWait || (wait == bestWait && room > bestRoom) ||
				(wait == bestWait && room == bestRoom && f.InFlight+added[i] < facts[best].InFlight+added[best])
			if better {
				best, bestWait, bestRoom = i, wait, room
			}
		}
		p.Cluster[r] = best
		if best >= 0 {
			added[best]++
		}
	}
	for i, f := range facts {
		switch {
		case !f.Up:
			p.Why[i] = fmt.Sprintf("%s: %d rows: not answering", f.Name, added[i])
		case f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight && added[i] < n:
			p.Why[i] = fmt.Sprintf("%s: %d rows: at max_in_flight %d", f.Name, added[i], f.MaxInFlight)
		case !f.Known:
			p.Why[i] = fmt.Sprintf("%s: %d rows: room unknown, %d in flight", f.Name, added[i], f.InFlight)
		default:
			w := f.Wait
			if w <= 0 {
				w = defaultWait
			}
			p.Why[i] = fmt.Sprintf("%s: %d rows: %d GPUs free, %d jobs pending, queue wait %s, %d in flight", f.Name, added[i], f.FreeGPUs, f.Pending, w.Round(time.Second), f.InFlight)
		}
	}
	return p
}
