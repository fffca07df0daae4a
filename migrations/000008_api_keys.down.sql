DROP TABLE IF EXISTS ferry.audit_log;
DROP TABLE IF EXISTS ferry.api_key_settings;
DROP TABLE IF EXISTS ferry.api_keys;
