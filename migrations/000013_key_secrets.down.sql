ALTER TABLE ferry.api_keys DROP COLUMN IF EXISTS sealed_secret;
