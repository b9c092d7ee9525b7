package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// gates is client-go's feature gates with WatchListClient set per check: what
// KUBE_FEATURE_WatchListClient=true|false does for a whole process. The reflector reads it when
// it is made, so each informer check makes its own.
type gates struct {
	base      clientfeatures.Gates
	watchList atomic.Bool
}

func (g *gates) Enabled(key clientfeatures.Feature) bool {
	if key == clientfeatures.WatchListClient {
		return g.watchList.Load()
	}
	return g.base.Enabled(key)
}

var featureGates *gates

func installGates() {
	featureGates = &gates{base: clientfeatures.FeatureGates()}
	clientfeatures.ReplaceFeatureGates(featureGates)
}

// events collects the names an informer's handler was told about.
type events struct {
	sync.Mutex
	added, deleted []string
}

func (ev *events) handler() cache.ResourceEventHandlerFuncs {
	name := func(obj any) string {
		if m, ok := obj.(metav1.Object); ok {
			return m.GetName()
		}
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			if m, ok := tomb.Obj.(metav1.Object); ok {
				return m.GetName()
			}
		}
		return ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ev.Lock(); ev.added = append(ev.added, name(obj)); ev.Unlock() },
		DeleteFunc: func(obj any) { ev.Lock(); ev.deleted = append(ev.deleted, name(obj)); ev.Unlock() },
	}
}

func (ev *events) saw(list *[]string, name string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		ev.Lock()
		defer ev.Unlock()
		return slices.Contains(*list, name), nil
	}
}

// informed runs an informer of the kind on s: it must sync to what a list holds, then hear of a
// Foo made and deleted. The class also says how it listed: a watch-list stream
// (sendInitialEvents) or a list, and whether a watch-list was tried and given up.
func informed(kind string, watchList bool) func(context.Context, *env, *subject) answer {
	return func(ctx context.Context, e *env, s *subject) answer {
		featureGates.watchList.Store(watchList)
		resetRequests()
		var informer cache.SharedIndexInformer
		switch kind {
		case "dynamic":
			informer = dynamicinformer.NewFilteredDynamicSharedInformerFactory(e.informDyn, 0, s.namespace, nil).ForResource(s.gvr).Informer()
		default:
			informer = metadatainformer.NewFilteredSharedInformerFactory(e.meta, 0, s.namespace, nil).ForResource(s.gvr).Informer()
		}
		ev := &events{}
		if _, err := informer.AddEventHandler(ev.handler()); err != nil {
			return answer{class: "error", detail: err.Error()}
		}
		run, stop := context.WithCancel(ctx)
		defer stop()
		go informer.RunWithContext(run)
		synced, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if !cache.WaitForCacheSync(synced.Done(), informer.HasSynced) {
			return answer{class: "never synced", detail: how(s)}
		}
		_, want, err := e.kube.fresh(ctx)
		if err != nil {
			return refused(err)
		}
		have := informer.GetStore().ListKeys()
		for i, key := range have {
			have[i] = key[strings.Index(key, "/")+1:]
		}
		sort.Strings(have)
		var problems []string
		if !slices.Equal(have, want) {
			problems = append(problems, fmt.Sprintf("synced to %d objects, the list had %d", len(have), len(want)))
		}
		made, err := e.change(ctx, s)
		if err != nil {
			return answer{class: unsettled, detail: err.Error()}
		}
		if within(ctx, ev.saw(&ev.added, made)) != nil {
			problems = append(problems, "missed a create")
		}
		_ = e.foos().Delete(ctx, made, metav1.DeleteOptions{})
		if within(ctx, ev.saw(&ev.deleted, made)) != nil {
			problems = append(problems, "missed a delete")
		}
		mode := listedBy(s)
		if len(problems) > 0 {
			return answer{class: strings.Join(problems, "; ") + " (" + mode + ")", detail: how(s)}
		}
		return answer{class: "synced, heard a create and a delete (" + mode + ")", detail: how(s)}
	}
}

func within(ctx context.Context, done func(context.Context) (bool, error)) error {
	return pollTimeout(ctx, 30*time.Second, done)
}

func listedBy(s *subject) string {
	streamed, listed := false, false
	for _, r := range requestsFor(s.gvr.Resource) {
		switch {
		case strings.Contains(r, "watch=true") && strings.Contains(r, "sendInitialEvents=true"):
			streamed = true
		case !strings.Contains(r, "watch=true"):
			listed = true
		}
	}
	switch {
	case streamed && listed:
		return "watch-list given up, listed"
	case streamed:
		return "watch-list stream"
	}
	return "list, then watch"
}

func how(s *subject) string {
	reqs := requestsFor(s.gvr.Resource)
	for i, r := range reqs {
		reqs[i] = r[:strings.Index(r, " ")] + " ?" + r[strings.Index(r, "?")+1:]
	}
	if len(reqs) > 3 {
		reqs = reqs[:3]
	}
	return strings.Join(reqs, " | ")
}

func informerChecks() []check {
	return []check{
		{via: "informer", rule: "dynamic informer, WatchList off: syncs, hears changes", run: informed("dynamic", false)},
		{via: "informer", rule: "dynamic informer, WatchList on: syncs by a watch-list stream, hears changes", run: informed("dynamic", true)},
		{via: "informer", rule: "metadata informer, WatchList off: syncs, hears changes", run: informed("metadata", false)},
		{via: "informer", rule: "metadata informer, WatchList on: syncs by a watch-list stream, hears changes", run: informed("metadata", true)},
	}
}
