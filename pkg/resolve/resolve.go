// Package resolve derives an object's sequence, group, order and wave from its labels and the
// compiled policies. It is pure: no API calls, no clock, no randomness.
package resolve

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
)

// Object is what resolution reads of an object.
type Object struct {
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	// NamespaceLabels are the labels of the object's namespace: policies and shared sequences
	// select namespaces by them. Needed only when idx.NeedsNamespaceLabels().
	NamespaceLabels map[string]string
	Labels          map[string]string
}

// Resolution is what wavegate derived for a group member.
type Resolution struct {
	Sequence   string
	Group      string
	GroupOrder int32
	Order      int32
	Wave       int32
	// GroupLabel is the label key the group was read from.
	GroupLabel string
	// Policy is the policy definition of the group, when a policy defines it.
	Policy *policy.Group
}

// Wave is the Argo CD sync-wave of a component: group order x 100 + order.
func Wave(groupOrder, order int32) int32 { return groupOrder*keys.WavesPerGroup + order }

// WaitJobWave is the sync-wave of a group's wait Job: after all of the group's components.
func WaitJobWave(groupOrder int32) int32 { return Wave(groupOrder, keys.WaitJobWaveOffset) }

var labelsPath = field.NewPath("metadata", "labels")

// Resolve returns the resolution of obj, nil when obj is not a group member, or the errors that
// make its labels unusable. Each error names the label and says how to fix it.
//
// A namespaced object may join only its own namespace's sequences (the namespace's name, or
// <namespace>.<name>) and the shared sequences a WavePolicy declares for its namespace; a
// cluster-scoped object only shared sequences declared with clusterScoped. Anything else is an
// error: no tenant can gate or hold another namespace's sequence. A cluster-scoped object that
// names no sequence is a member only if it carries wavegate.io/group (an error then), never for a
// policy's group label.
func Resolve(obj Object, idx *policy.Index) (*Resolution, field.ErrorList) {
	seq, hasSeq := obj.Labels[keys.SequenceLabel]
	if !hasSeq {
		seq = obj.Namespace
	}
	root := idx
	idx = idx.For(obj.Namespace, obj.NamespaceLabels, seq)
	groupLabel, group, found := groupOf(obj.Labels, idx)
	if !found {
		return nil, nil
	}
	if obj.Namespace == "" && !hasSeq && groupLabel != keys.GroupLabel {
		// A policy's group label (app.kubernetes.io/component, say) is one that charts set for their
		// own reasons, and a cluster-scoped object is in no namespace that opted in: carrying it, a
		// ClusterRole or a CRD joins nothing (the API server calls the webhook for cluster-scoped
		// objects whatever the namespace selector says). It joins a sequence by naming it.
		return nil, nil
	}
	res := &Resolution{Group: group, GroupLabel: groupLabel}
	var errs field.ErrorList

	gp := labelsPath.Key(groupLabel)
	if group == "" {
		errs = append(errs, field.Required(gp, "the group must not be empty: set a group name or remove the label"))
	} else if msgs := validation.IsValidLabelValue(group); len(msgs) > 0 {
		// Label values are validated by the API server, but a group can also come from elsewhere.
		errs = append(errs, field.Invalid(gp, group, fmt.Sprintf("a group must be a valid label value: %v", msgs)))
	}

	if v, ok := obj.Labels[keys.OrderLabel]; ok {
		n, err := parseInt(v, 0, keys.MaxOrder)
		if err != nil {
			errs = append(errs, field.Invalid(labelsPath.Key(keys.OrderLabel), v,
				fmt.Sprintf("must be an integer from 0 to %d (the component's order inside its group); fix or remove the label", keys.MaxOrder)))
		}
		res.Order = n
	}

	res.Sequence = seq
	sp := labelsPath.Key(keys.SequenceLabel)
	switch {
	case hasSeq && seq == "":
		errs = append(errs, field.Required(sp, "the sequence must not be empty: name a sequence or remove the label to use the namespace's sequence"))
	case !hasSeq && obj.Namespace == "":
		errs = append(errs, field.Required(sp, "a cluster-scoped object must name the sequence it joins: add the label "+keys.SequenceLabel+
			" with a sequence that a WavePolicy declares in spec.sequences with clusterScoped: true"))
	case obj.Namespace == "" && !root.MayJoin(seq, "", nil):
		errs = append(errs, field.Forbidden(sp, fmt.Sprintf("a cluster-scoped object may join only a sequence that a WavePolicy declares "+
			"for cluster-scoped members: ask a platform team to add {name: %s, clusterScoped: true} to a WavePolicy's spec.sequences", seq)))
	case obj.Namespace != "" && !root.MayJoin(seq, obj.Namespace, obj.NamespaceLabels):
		errs = append(errs, field.Forbidden(sp, fmt.Sprintf("namespace %s may join only its own sequences (%s, or %s.<name>) and shared sequences "+
			"a platform team declares for it: a WavePolicy's spec.sequences entry {name: %s} whose namespaceSelector selects namespace %s",
			obj.Namespace, obj.Namespace, obj.Namespace, seq, obj.Namespace)))
	}

	order, err := groupOrder(obj.Labels, gp, group, idx)
	if err != nil {
		errs = append(errs, err)
	}
	res.GroupOrder = order
	if g, ok := idx.Group(group); ok {
		res.Policy = &g
	}
	if len(errs) > 0 {
		return nil, errs
	}
	res.Wave = Wave(res.GroupOrder, res.Order)
	return res, nil
}

// groupOf finds the group label: wavegate.io/group first, then each policy's group label.
func groupOf(labels map[string]string, idx *policy.Index) (key, value string, found bool) {
	if v, ok := labels[keys.GroupLabel]; ok {
		return keys.GroupLabel, v, true
	}
	for _, k := range idx.GroupLabels()[1:] {
		if v, ok := labels[k]; ok {
			return k, v, true
		}
	}
	return "", "", false
}

// groupOrder returns a group's order; gp is the path of the label the group was read from.
func groupOrder(labels map[string]string, gp *field.Path, group string, idx *policy.Index) (int32, *field.Error) {
	op := labelsPath.Key(keys.GroupOrderLabel)
	if c := idx.Conflict(group); c != "" {
		return 0, field.Invalid(gp, group, c+": make the policies agree")
	}
	v, hasLabel := labels[keys.GroupOrderLabel]
	var fromLabel int32
	if hasLabel {
		n, err := parseInt(v, keys.MinGroupOrder, keys.MaxGroupOrder)
		if err != nil {
			return 0, field.Invalid(op, v, fmt.Sprintf("must be an integer from %d to %d; fix or remove the label",
				keys.MinGroupOrder, keys.MaxGroupOrder))
		}
		fromLabel = n
	}
	if g, ok := idx.Group(group); ok {
		if hasLabel && fromLabel != g.Order {
			return 0, field.Invalid(op, v, fmt.Sprintf("WavePolicy %q gives group %q order %d: remove the label or make it %d",
				g.Policy, group, g.Order, g.Order))
		}
		return g.Order, nil
	}
	if p := idx.RequiringKnownGroups(); p != "" {
		return 0, field.Invalid(gp, group, fmt.Sprintf("WavePolicy %s requires known groups: use one of %s, or ask a platform team to add the group",
			p, strings.Join(groupNames(idx), ", ")))
	}
	if !hasLabel {
		return 0, field.Required(op, fmt.Sprintf("group %q has no order: add it to a WavePolicy or set the label %s to an integer",
			group, keys.GroupOrderLabel))
	}
	return fromLabel, nil
}

func groupNames(idx *policy.Index) []string {
	groups := idx.Groups()
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g.Name
	}
	return out
}

func parseInt(s string, minimum, maximum int32) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, err
	}
	if n < int64(minimum) || n > int64(maximum) {
		return 0, fmt.Errorf("%d out of range", n)
	}
	return int32(n), nil
}

// TemplateLabels returns the labels that pod templates of a member carry, so that its pods are
// recognised as members of the same group and sequence.
func TemplateLabels(res *Resolution, labels map[string]string) map[string]string {
	out := map[string]string{keys.GroupLabel: res.Group}
	for _, k := range []string{keys.SequenceLabel, keys.GroupOrderLabel} {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Stamped is where admission placed an object (the sequence, group and group order of Annotations), for
// when its labels no longer resolve (a policy deleted and applied again, two policies disagreeing
// for a moment): where it stood when it was admitted. False when admission stamped no group.
func Stamped(annotations map[string]string) (*Resolution, bool) {
	g := annotations[keys.ResolvedGroupAnnotation]
	n, err := strconv.ParseInt(annotations[keys.ResolvedGroupOrderAnnotation], 10, 32)
	if g == "" || err != nil {
		return nil, false
	}
	return &Resolution{Sequence: annotations[keys.ResolvedSequenceAnnotation], Group: g, GroupOrder: int32(n)}, true
}

// Annotations returns the annotations wavegate records on a member.
func Annotations(res *Resolution) map[string]string {
	return map[string]string{
		keys.ResolvedSequenceAnnotation:   res.Sequence,
		keys.ResolvedGroupAnnotation:      res.Group,
		keys.ResolvedGroupOrderAnnotation: strconv.Itoa(int(res.GroupOrder)),
		keys.ResolvedWaveAnnotation:       strconv.Itoa(int(res.Wave)),
	}
}
