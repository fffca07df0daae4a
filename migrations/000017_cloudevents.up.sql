-- CloudEvents at the topic's edge (API.md § CloudEvents in and out): the
-- events table keeps one shape. An event published as a CloudEvent keeps
-- the attributes Ferry's own columns do not hold (source, subject, time,
-- datacontenttype, dataschema, extensions) in ce, with data that is not
-- JSON as data_base64 (byte for byte); an event published as plain JSON
-- has NULL there and is given the defaults when read (store.CloudAttrs).
-- A topic may name the source of its plain JSON events (topics.source;
-- NULL: /ferry/topics/{name}).
-- A push target chooses its body with push_format (standard,
-- cloudevents, cloudevents-binary). Both columns are added without a
-- rewrite (nullable; a constant default), and the previous release's
-- statements, which name their columns, keep working.
ALTER TABLE ferry.events ADD COLUMN ce jsonb;
ALTER TABLE ferry.queues ADD COLUMN push_format text NOT NULL DEFAULT 'standard';
ALTER TABLE ferry.topics ADD COLUMN source text;
