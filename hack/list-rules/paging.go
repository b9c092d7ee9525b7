package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
)

// pages follows a list of `limit` from its first page, making a change after the first page;
// every page must carry the first one's resourceVersion and remainingItemCount, and together
// they must hold exactly what the first page's snapshot held.
func pages(opts metav1.ListOptions) func(context.Context, *env, *subject) answer {
	return func(ctx context.Context, e *env, s *subject) answer {
		_, at, err := s.fresh(ctx)
		if err != nil {
			return refused(err)
		}
		first, err := s.list(ctx, opts)
		if err != nil {
			return refused(err)
		}
		if first.GetContinue() == "" {
			return described(limitFree, first)
		}
		made, err := e.change(ctx, s)
		if err != nil {
			return answer{class: unsettled, detail: err.Error()}
		}
		var problems []string
		sawMade := false
		seen := names(first)
		rv := first.GetResourceVersion()
		remaining := func(page int, l *unstructured.UnstructuredList, seen int) {
			want := int64(len(at) - seen)
			got := l.GetRemainingItemCount()
			if l.GetContinue() != "" && (got == nil || *got != want) {
				problems = append(problems, fmt.Sprintf("page %d: remainingItemCount %v, not %d", page, deref(got), want))
			}
		}
		remaining(1, first, len(seen))
		token := first.GetContinue()
		for page := 2; token != ""; page++ {
			next := opts
			next.ResourceVersion, next.ResourceVersionMatch, next.Continue = "", "", token
			l, err := s.list(ctx, next)
			if err != nil {
				a := refused(err)
				return answer{class: fmt.Sprintf("page %d: %s", page, a.class), detail: a.detail}
			}
			if l.GetResourceVersion() != rv {
				problems = append(problems, fmt.Sprintf("page %d: another resourceVersion", page))
			}
			if slices.Contains(names(l), made) {
				sawMade = true
				problems = append(problems, fmt.Sprintf("page %d: the object made after page 1", page))
			}
			seen = append(seen, names(l)...)
			remaining(page, l, len(seen))
			token = l.GetContinue()
		}
		sort.Strings(seen)
		if !slices.Equal(seen, at) && !sawMade {
			problems = append(problems, fmt.Sprintf("%d items in all, the snapshot had %d", len(seen), len(at)))
		}
		detail := fmt.Sprintf("rv=%s, %d items on %d-item pages", rv, len(seen), opts.Limit)
		if len(problems) > 0 {
			return answer{class: strings.Join(problems, "; "), detail: detail}
		}
		return answer{class: snapshot, detail: detail}
	}
}

func deref(p *int64) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// aged is the first page's continue token with its resourceVersion moved to 1: a token from long
// before anything the server holds. Both servers' tokens are base64 JSON with an "rv" field.
func aged(token string) (string, error) {
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding} {
		raw, err := enc.DecodeString(token)
		if err != nil {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(raw, &fields) != nil {
			continue
		}
		switch fields["rv"].(type) {
		case float64:
			fields["rv"] = 1
		case string:
			fields["rv"] = "1"
		default:
			return "", fmt.Errorf("no rv in the token %s", raw)
		}
		out, err := json.Marshal(fields)
		if err != nil {
			return "", err
		}
		// JSON may end in blanks: a length of 3n needs no base64 padding, so the token reads the
		// same to a decoder that wants padding (Python's) and to one that refuses it (Go's Raw).
		for len(out)%3 != 0 {
			out = append(out, ' ')
		}
		return enc.EncodeToString(out), nil
	}
	return "", fmt.Errorf("the token %q is not base64 JSON", token)
}

func pageChecks() []check {
	limit := func(rv, match string) func(context.Context, *env, *subject) answer {
		return func(ctx context.Context, e *env, s *subject) answer {
			r, _, err := s.fresh(ctx)
			if err != nil {
				return refused(err)
			}
			o := metav1.ListOptions{Limit: 2, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatch(match)}
			if rv == "R" {
				o.ResourceVersion = r
			}
			l, err := s.list(ctx, o)
			return listAnswer(l, err, func(l *unstructured.UnstructuredList) string {
				if l.GetContinue() == "" {
					return limitFree
				}
				return paged
			})
		}
	}
	return []check{
		{via: "raw", rule: "limit=2 and continue: pages of the first page's snapshot, a change between pages unseen", run: pages(metav1.ListOptions{Limit: 2})},
		{via: "raw", rule: "limit=2, resourceVersion=R, match=Exact: pages of the state at R", accept: []string{snapshot, limitFree},
			run: func(ctx context.Context, e *env, s *subject) answer {
				rv, _, err := s.fresh(ctx)
				if err != nil {
					return refused(err)
				}
				return pages(metav1.ListOptions{Limit: 2, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})(ctx, e, s)
			}},
		{via: "raw", rule: `limit=2, resourceVersion="0": a page, or limit ignored`, accept: []string{paged, limitFree}, run: limit("0", "")},
		{via: "raw", rule: "limit=2, resourceVersion=R, match=NotOlderThan: a page, or limit ignored", accept: []string{paged, limitFree}, run: limit("R", "NotOlderThan")},
		{
			via: "raw", rule: "continue token from long ago: 410 Expired, or the state at its version",
			accept: []string{gone, oldState},
			run: func(ctx context.Context, e *env, s *subject) answer {
				first, err := s.list(ctx, metav1.ListOptions{Limit: 2})
				if err != nil {
					return refused(err)
				}
				token, err := aged(first.GetContinue())
				if err != nil {
					return answer{class: "no token to age", detail: err.Error()}
				}
				l, err := s.list(ctx, metav1.ListOptions{Limit: 2, Continue: token})
				return listAnswer(l, err, func(l *unstructured.UnstructuredList) string {
					if len(l.Items) == 0 {
						return oldState // nothing existed at version 1
					}
					return "200, today's state"
				})
			},
		},
	}
}

// pagerChecks run client-go's pager (tools/pager), as informers and kubectl do, with 2-item pages.
func pagerChecks() []check {
	listing := func(opts metav1.ListOptions, changeAfterFirst, each bool) func(context.Context, *env, *subject) answer {
		return func(ctx context.Context, e *env, s *subject) answer {
			rv, at, err := s.fresh(ctx)
			if err != nil {
				return refused(err)
			}
			o := opts
			if o.ResourceVersion == "R" {
				o.ResourceVersion = rv
			}
			calls, fulls := 0, 0
			var made string
			p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				calls++
				if o.Continue == "" {
					fulls++
				}
				l, err := s.list(ctx, o)
				if err == nil && calls == 1 && changeAfterFirst {
					made, err = e.change(ctx, s)
				}
				return l, err
			})
			p.PageSize = 2
			var got []string
			collect := func(obj runtime.Object) error {
				m, err := meta.Accessor(obj)
				if err != nil {
					return err
				}
				got = append(got, m.GetName())
				return nil
			}
			if each {
				err = p.EachListItem(ctx, o, collect)
			} else {
				var list runtime.Object
				if list, _, err = p.List(ctx, o); err == nil {
					err = meta.EachListItem(list, collect)
				}
			}
			if err != nil {
				return refused(err)
			}
			sort.Strings(got)
			detail := fmt.Sprintf("%d items in %d requests (%d from the start)", len(got), calls, fulls)
			switch {
			case fulls > 1:
				return answer{class: "started over (410 on a page)", detail: detail}
			case made != "" && slices.Contains(got, made):
				return answer{class: "saw the object made after page 1", detail: detail}
			case !slices.Equal(got, at):
				return answer{class: fmt.Sprintf("%d items, the list had %d", len(got), len(at)), detail: detail}
			case changeAfterFirst:
				return answer{class: onePass, detail: detail}
			}
			return answer{class: complete, detail: detail}
		}
	}
	return []check{
		{via: "pager", rule: "pager.List, resourceVersion unset: every object", run: listing(metav1.ListOptions{}, false, false)},
		{via: "pager", rule: `pager.List, resourceVersion="0" (the reflector's list): every object`, run: listing(metav1.ListOptions{ResourceVersion: "0"}, false, false)},
		{via: "pager", rule: "pager.List, resourceVersion=R, match=NotOlderThan: every object", run: listing(metav1.ListOptions{ResourceVersion: "R", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, false, false)},
		{via: "pager", rule: "pager.List, a change after page 1: one snapshot, the change unseen", run: listing(metav1.ListOptions{}, true, false)},
		{via: "pager", rule: "pager.EachListItem, a change after page 1: one snapshot, the change unseen", run: listing(metav1.ListOptions{}, true, true)},
		// EachListItem keeps resourceVersionMatch on page 2 (List clears it): kube-apiserver's 422.
		{via: "pager", rule: "pager.EachListItem, resourceVersion=R, match=NotOlderThan", run: listing(metav1.ListOptions{ResourceVersion: "R", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, false, true)},
	}
}
