-- The SQL helpers that the one JSON-kind, size and traceparent rule of
-- store/definitions/validation.sql replaced (ferry.json_kind,
-- ferry.json_compact_size, ferry.valid_traceparent): no definition calls
-- them, no binary calls them, and they were never granted to the SQL API's
-- roles. Only the SQL API's functions as the migrations made them (a
-- database no release has installed the definitions on yet) still name
-- send_json_kind and publish_kind, on their error paths; migrations.Up
-- installs the definitions right after the migrations, under the same
-- lock, and those replace them. The down puts the four back as migration
-- 000009 made them.
DROP FUNCTION IF EXISTS ferry.send_json_kind(jsonb);
DROP FUNCTION IF EXISTS ferry.publish_kind(jsonb);
DROP FUNCTION IF EXISTS ferry.send_compact_size(jsonb);
DROP FUNCTION IF EXISTS ferry.send_valid_traceparent(text);
