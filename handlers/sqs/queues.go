package sqs

import (
	"encoding/base64"
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// action runs one SQS action; its result is nil for an action that
// answers none.
type action func(f *face, cl *call) (any, error)

// actionTable is every action the face serves, by name.
var actionTable = actions() //nolint:gochecknoglobals // a read-only table

// actions is every action the face serves.
func actions() map[string]action {
	return map[string]action{
		"CreateQueue":                  (*face).createQueue,
		"GetQueueUrl":                  (*face).getQueueURL,
		"ListQueues":                   (*face).listQueues,
		"DeleteQueue":                  (*face).deleteQueue,
		"GetQueueAttributes":           (*face).getQueueAttributes,
		"SetQueueAttributes":           (*face).setQueueAttributes,
		"PurgeQueue":                   (*face).purgeQueue,
		"SendMessage":                  (*face).sendMessage,
		"SendMessageBatch":             (*face).sendMessageBatch,
		"ReceiveMessage":               (*face).receiveMessage,
		"DeleteMessage":                (*face).deleteMessage,
		"DeleteMessageBatch":           (*face).deleteMessageBatch,
		"ChangeMessageVisibility":      (*face).changeVisibility,
		"ChangeMessageVisibilityBatch": (*face).changeVisibilityBatch,
		"AddPermission":                unsupported("access is Ferry's keys (POST /v1/keys), not queue policies"),
		"RemovePermission":             unsupported("access is Ferry's keys (POST /v1/keys), not queue policies"),
		"TagQueue":                     (*face).tagQueue,
		"UntagQueue":                   (*face).untagQueue,
		"ListQueueTags":                (*face).listQueueTags,
		"ListDeadLetterSourceQueues":   (*face).listDeadLetterSourceQueues,
		"StartMessageMoveTask":         (*face).startMoveTask,
		"ListMessageMoveTasks":         (*face).listMoveTasks,
		"CancelMessageMoveTask":        (*face).cancelMoveTask,
	}
}

// unsupported answers an action Ferry does not serve (yet), saying why.
func unsupported(why string) action {
	return func(_ *face, cl *call) (any, error) {
		return nil, fail(codeUnsupported, "%s is not supported by Ferry: %s.", cl.action, why)
	}
}

// queueURLInput is the input of the actions that name only a queue.
type queueURLInput struct {
	QueueUrl string `json:"QueueUrl"` //nolint:revive // SQS's member name
}

// sqsNameRe is SQS's rule for a queue name; Ferry's own rule
// (handlers.ValidName) applies too.
var sqsNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// createName checks the name of a queue to create against SQS's rules and
// Ferry's.
func createName(name string) error {
	base := strings.TrimSuffix(name, ".fifo")
	if name == "" {
		return missingParam("QueueName")
	}
	if !sqsNameRe.MatchString(base) || len(name) > 80 {
		return invalidParam("QueueName", "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
	}
	if !handlers.ValidName(name) {
		return invalidParam("QueueName", "a Ferry queue name must start with a letter or digit")
	}
	return nil
}

// queueName is the queue the request names: its QueueUrl, else the
// QueueUrl it was posted to. Only the path counts: /<account>/<queue>.
func queueName(cl *call, queueURL string) (string, error) {
	if queueURL == "" {
		if q := cl.c.Param("queue"); q != "" {
			queueURL = cl.c.Request().URL.Path
		} else {
			return "", missingParam("QueueUrl")
		}
	}
	u, err := url.Parse(queueURL)
	if err != nil {
		return "", fail(codeInvalidAddress, "The address %s is not valid for this endpoint.", queueURL)
	}
	account, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if !ok || account == "" || strings.Contains(name, "/") {
		return "", fail(codeInvalidAddress, "The address %s is not valid for this endpoint.", queueURL)
	}
	if !handlers.ValidName(name) {
		return "", noQueue()
	}
	return name, nil
}

// namedQueue resolves the queue the request names after checking that
// the key may do want on it; cached: from the queue cache (hot paths).
func (f *face) namedQueue(cl *call, queueURL string, want access.Action, cached bool) (store.Queue, error) {
	name, err := queueName(cl, queueURL)
	if err != nil {
		return store.Queue{}, err
	}
	if err := cl.permit(name, want); err != nil {
		return store.Queue{}, err
	}
	if cached {
		return f.Queues.Get(cl.ctx, f.Pool, name)
	}
	return store.QueueGet(cl.ctx, f.Pool, name)
}

type createQueueInput struct {
	QueueName  string            `json:"QueueName"`
	Attributes map[string]string `json:"Attributes" query:"Attribute"`
	Tags       map[string]string `json:"tags" query:"Tag,Key,Value"`
}

type queueURLOutput struct {
	QueueUrl string `json:"QueueUrl"` //nolint:revive // SQS's member name
}

// createQueue creates the queue, or answers the URL of an existing one
// whose settings are those asked (QueueAlreadyExists when they differ).
func (f *face) createQueue(cl *call) (any, error) {
	var in createQueueInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	if err := createName(in.QueueName); err != nil {
		return nil, err
	}
	if err := cl.permit(in.QueueName, access.Manage); err != nil {
		return nil, err
	}
	s, err := toSettings(in.QueueName, in.Attributes, true)
	if err != nil {
		return nil, err
	}
	if len(in.Tags) > 0 {
		if err := tagsCheck(in.Tags); err != nil {
			return nil, err
		}
		s.patch.Tags = &in.Tags // given to a queue it creates; not compared
	}
	// A queue made without a RedrivePolicy never dead-letters, as on SQS;
	// an existing queue is compared on the attributes given only.
	w := s
	if _, ok := in.Attributes[attrRedrive]; !ok {
		never := store.MaxReceivesNever
		w.patch.MaxReceives = &never
	}
	q, created, err := f.write(cl, in.QueueName, w, true)
	if err != nil {
		return nil, err
	}
	if !created && s.differs(q, f.maxMessageSize(q)) {
		return nil, fail(codeQueueExists, "A queue already exists with the same name and a different value for attribute(s).")
	}
	return queueURLOutput{QueueUrl: f.queueURL(cl, in.QueueName)}, nil
}

// write writes the settings s of the named queue, checked by the REST
// rules first; with create, only to a queue it creates (store.QueueCreate:
// an existing queue is answered unchanged, created false).
func (f *face) write(cl *call, name string, s queueSettings, create bool) (store.Queue, bool, error) {
	if err := handlers.CheckQueueSettings(s.patch); err != nil {
		return store.Queue{}, false, err
	}
	// Dead-lettering into a queue sends into it (as on REST).
	if dlq := s.patch.DeadLetterQueue; dlq != nil && *dlq != "" {
		if err := cl.permit(*dlq, access.Send); err != nil {
			return store.Queue{}, false, err
		}
	}
	put := store.QueueUpsert
	if create {
		put = store.QueueCreate
	}
	q, created, err := put(cl.ctx, f.Pool, name, s.patch)
	if err != nil {
		var verr *store.ValidationError
		if errors.As(err, &verr) && verr.Field == "dead_letter_queue" {
			return store.Queue{}, false, invalidAttrValue(attrRedrive, "deadLetterTargetArn: "+verr.Message)
		}
		return store.Queue{}, false, err
	}
	f.Queues.Forget(name)
	return q, created, nil
}

type getQueueURLInput struct {
	QueueName              string `json:"QueueName"`
	QueueOwnerAWSAccountId string `json:"QueueOwnerAWSAccountId"` //nolint:revive // SQS's member name
}

func (f *face) getQueueURL(cl *call) (any, error) {
	var in getQueueURLInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, missingParam("QueueName")
	}
	if !handlers.ValidName(in.QueueName) {
		return nil, noQueue()
	}
	if err := cl.permit(in.QueueName, access.Read); err != nil {
		return nil, err
	}
	if _, err := store.QueueGet(cl.ctx, f.Pool, in.QueueName); err != nil {
		return nil, err
	}
	return queueURLOutput{QueueUrl: f.queueURL(cl, in.QueueName)}, nil
}

type listQueuesInput struct {
	QueueNamePrefix string `json:"QueueNamePrefix"`
	MaxResults      *int   `json:"MaxResults"`
	NextToken       string `json:"NextToken"`
}

type listQueuesOutput struct {
	QueueUrls []string `json:"QueueUrls,omitempty" xml:"QueueUrl"` //nolint:revive // SQS's member name
	NextToken string   `json:"NextToken,omitempty" xml:",omitempty"`
}

// listQueues answers the queues the key may read whose names start with
// the prefix, a page of MaxResults (then with a NextToken when more
// follow), else up to 1000, as SQS.
func (f *face) listQueues(cl *call) (any, error) {
	var in listQueuesInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.MaxResults)
	if err != nil {
		return nil, err
	}
	after := ""
	if in.NextToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(in.NextToken)
		if err != nil || !handlers.ValidName(string(b)) {
			return nil, invalidParam("NextToken", "is not a token ListQueues answered")
		}
		after = string(b)
	}
	out := listQueuesOutput{}
	last, more, err := f.scanQueues(cl, in.QueueNamePrefix, after, limit, func(name string) {
		out.QueueUrls = append(out.QueueUrls, f.queueURL(cl, name))
	})
	if err != nil {
		return nil, err
	}
	if more && in.MaxResults != nil {
		out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(last))
	}
	return out, nil
}

// scanQueues calls add with the names after `after` that start with
// prefix and that the key may read, up to limit of them; it reports the
// last one given and whether another follows.
func (f *face) scanQueues(cl *call, prefix, after string, limit int, add func(string)) (string, bool, error) {
	n, last := 0, ""
	for {
		qs, more, err := store.QueueList(cl.ctx, f.Pool, store.QueueListParams{After: after, Limit: 1000})
		if err != nil {
			return "", false, err
		}
		for _, q := range qs {
			if !strings.HasPrefix(q.Name, prefix) || !cl.key.Allows(access.Queue, q.Name, access.Read) {
				continue
			}
			if n == limit {
				return last, true, nil
			}
			add(q.Name)
			n, last = n+1, q.Name
		}
		if !more || len(qs) == 0 {
			return last, false, nil
		}
		after = qs[len(qs)-1].Name
	}
}

func (f *face) deleteQueue(cl *call) (any, error) {
	var in queueURLInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	name, err := queueName(cl, in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := cl.permit(name, access.Manage); err != nil {
		return nil, err
	}
	if err := handlers.QueueDeleteAndClean(cl.ctx, f.Pool, f.River, name); err != nil {
		return nil, err
	}
	f.Queues.Forget(name)
	return nil, nil
}

func (f *face) purgeQueue(cl *call) (any, error) {
	var in queueURLInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Manage, false)
	if err != nil {
		return nil, err
	}
	return nil, store.MessagePurge(cl.ctx, f.Pool, q.ID)
}

type getQueueAttributesInput struct {
	QueueUrl       string   `json:"QueueUrl"`                             //nolint:revive // SQS's member name
	AttributeNames []string `json:"AttributeNames" query:"AttributeName"` //nolint:revive // SQS's member name
}

type attributesOutput struct {
	Attributes attrMap `json:"Attributes,omitempty" xml:"Attribute,omitempty"`
}

func (f *face) getQueueAttributes(cl *call) (any, error) {
	var in getQueueAttributesInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	for _, n := range in.AttributeNames {
		if !knownAttr(n) {
			return nil, fail(codeInvalidAttrName, "Unknown Attribute %s.", n)
		}
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Read, false)
	if err != nil {
		return nil, err
	}
	stats, err := store.QueueStatsGet(cl.ctx, f.Pool, []int64{q.ID})
	if err != nil {
		return nil, err
	}
	all := f.queueAttributes(cl, q, stats[q.ID])
	out := attrMap{}
	for _, n := range in.AttributeNames {
		if n == "All" {
			out = all
			break
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return attributesOutput{Attributes: out}, nil
}

type setQueueAttributesInput struct {
	QueueUrl   string            `json:"QueueUrl"` //nolint:revive // SQS's member name
	Attributes map[string]string `json:"Attributes" query:"Attribute"`
}

func (f *face) setQueueAttributes(cl *call) (any, error) {
	var in setQueueAttributesInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	name, err := queueName(cl, in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := cl.permit(name, access.Manage); err != nil {
		return nil, err
	}
	s, err := toSettings(name, in.Attributes, false)
	if err != nil {
		return nil, err
	}
	if _, err := store.QueueGet(cl.ctx, f.Pool, name); err != nil {
		return nil, err
	}
	_, _, err = f.write(cl, name, s, false)
	return nil, err
}

type listDeadLetterSourceQueuesInput struct {
	QueueUrl   string `json:"QueueUrl"`   //nolint:revive // SQS's member name
	MaxResults *int   `json:"MaxResults"` //nolint:revive // SQS's member name
	NextToken  string `json:"NextToken"`  //nolint:revive // SQS's member name
}

type listDeadLetterSourceQueuesOutput struct {
	QueueUrls []string `json:"queueUrls" xml:"QueueUrl"` //nolint:revive,tagliatelle // SQS's member name
	NextToken string   `json:"NextToken,omitempty" xml:",omitempty"`
}

// listDeadLetterSourceQueues answers the queues whose RedrivePolicy
// names the queue (its dead_letter_sources that are queues, by name, the
// ones the key may read), a page of MaxResults (then with a NextToken:
// the last name answered) when given.
func (f *face) listDeadLetterSourceQueues(cl *call) (any, error) {
	var in listDeadLetterSourceQueuesInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.MaxResults)
	if err != nil {
		return nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Read, false)
	if err != nil {
		return nil, err
	}
	sources, err := store.DeadLetterSources(cl.ctx, f.Pool, []int64{q.ID})
	if err != nil {
		return nil, err
	}
	out := listDeadLetterSourceQueuesOutput{QueueUrls: []string{}}
	for _, n := range sources[q.ID] {
		if strings.Contains(n, "/") || n <= in.NextToken || !cl.key.Allows(access.Queue, n, access.Read) {
			continue // a subscription, or on an earlier page
		}
		if len(out.QueueUrls) == limit {
			out.NextToken = out.QueueUrls[limit-1][strings.LastIndex(out.QueueUrls[limit-1], "/")+1:]
			break
		}
		out.QueueUrls = append(out.QueueUrls, f.queueURL(cl, n))
	}
	return out, nil
}

// pageLimit is a list action's page size: MaxResults, 1 to 1000, else
// 1000, as SQS.
func pageLimit(maxResults *int) (int, error) {
	if maxResults == nil {
		return 1000, nil
	}
	if *maxResults < 1 || *maxResults > 1000 {
		return 0, invalidParam("MaxResults", "must be between 1 and 1000")
	}
	return *maxResults, nil
}
