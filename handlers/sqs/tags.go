package sqs

import (
	"encoding/xml"
	"errors"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// tagMap is a queue's tags: a JSON object, and in XML one
// <Key>/<Value> element per tag, by key.
type tagMap map[string]string

// MarshalXML writes the tags as SQS's flattened map of Key and Value.
func (m tagMap) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	for _, k := range sortedKeys(m) {
		entry := struct {
			Key   string
			Value string
		}{k, m[k]}
		if err := e.EncodeElement(entry, start); err != nil {
			return err
		}
	}
	return nil
}

type tagQueueInput struct {
	QueueUrl string            `json:"QueueUrl"` //nolint:revive // SQS's member name
	Tags     map[string]string `json:"Tags" query:"Tag,Key,Value"`
}

// tagQueue adds the tags to the queue's (REST's tags), replacing the
// values of keys it has; at most 50 tags in all (InvalidParameterValue,
// and nothing is written).
func (f *face) tagQueue(cl *call) (any, error) {
	var in tagQueueInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	if len(in.Tags) == 0 {
		return nil, missingParam("Tags")
	}
	if err := tagsCheck(in.Tags); err != nil {
		return nil, err
	}
	return nil, f.tagsChange(cl, in.QueueUrl, in.Tags, nil)
}

type untagQueueInput struct {
	QueueUrl string   `json:"QueueUrl"`               //nolint:revive // SQS's member name
	TagKeys  []string `json:"TagKeys" query:"TagKey"` //nolint:revive // SQS's member name
}

// untagQueue removes the tags of the keys given; a key the queue has not
// is no error, as on SQS.
func (f *face) untagQueue(cl *call) (any, error) {
	var in untagQueueInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	if len(in.TagKeys) == 0 {
		return nil, missingParam("TagKeys")
	}
	keys := map[string]string{}
	for _, k := range in.TagKeys {
		keys[k] = ""
	}
	if err := handlers.CheckTags(keys); err != nil { // text a tag key can be
		return nil, invalidParam("TagKeys", "keys are 1 to 128 characters of text")
	}
	return nil, f.tagsChange(cl, in.QueueUrl, nil, in.TagKeys)
}

// tagsChange makes a tag change on the queue the URL names, which needs
// manage there (API.md: tags are managed as the queue's settings).
func (f *face) tagsChange(cl *call, queueURL string, set map[string]string, remove []string) error {
	name, err := queueName(cl, queueURL)
	if err != nil {
		return err
	}
	if err := cl.permit(name, access.Manage); err != nil {
		return err
	}
	if err := store.QueueTagsChange(cl.ctx, f.Pool, name, set, remove); err != nil {
		var verr *store.ValidationError
		if errors.As(err, &verr) {
			return invalidParam("Tags", verr.Message)
		}
		return err
	}
	f.Queues.Forget(name)
	return nil
}

type listQueueTagsOutput struct {
	Tags tagMap `json:"Tags,omitempty" xml:"Tag,omitempty"`
}

func (f *face) listQueueTags(cl *call) (any, error) {
	var in queueURLInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Manage, false)
	if err != nil {
		return nil, err
	}
	return listQueueTagsOutput{Tags: q.Tags}, nil
}

// tagsCheck checks tags by REST's rules of a queue's tags
// (handlers.CheckTags: SQS's limits), answered as SQS words them.
func tagsCheck(tags map[string]string) error {
	if err := handlers.CheckTags(tags); err != nil {
		return invalidParam("Tags", "at most 50 tags, keys of 1 to 128 characters and values of at most 256")
	}
	return nil
}
