-- Back to 000011: the functions as the migrations made them (the baseline
-- that 000012 recorded), whatever generation of the definitions was
-- installed since. A function the definitions added is dropped; every
-- recorded one gets its recorded text and grants again (a recorded
-- default, NULL, comes back as its explicit equivalent).
DO $$
DECLARE
    f record;
    fn regprocedure;
    acl aclitem[];
    g record;
BEGIN
    SET LOCAL search_path = pg_catalog, pg_temp;
    FOR f IN
        SELECT p.oid::regprocedure::text AS signature FROM pg_proc p
        WHERE p.pronamespace = 'ferry'::regnamespace AND p.prokind = 'f'
            AND p.oid::regprocedure::text NOT IN (SELECT b.signature FROM ferry.definitions_baseline b)
    LOOP
        EXECUTE 'DROP FUNCTION ' || f.signature;
    END LOOP;
    FOR f IN SELECT b.signature, b.definition, b.acl FROM ferry.definitions_baseline b LOOP
        EXECUTE f.definition;
        fn := f.signature::regprocedure;
        SELECT p.proacl INTO acl FROM pg_proc p WHERE p.oid = fn;
        CONTINUE WHEN acl IS NOT DISTINCT FROM f.acl;
        FOR g IN SELECT DISTINCT a.grantee FROM aclexplode(acl) a LOOP
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', fn,
                CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END);
        END LOOP;
        FOR g IN
            SELECT a.grantee, a.privilege_type
            FROM aclexplode(coalesce(f.acl, acldefault('f', (SELECT p.proowner FROM pg_proc p WHERE p.oid = fn)))) a
        LOOP
            EXECUTE format('GRANT %s ON FUNCTION %s TO %s', g.privilege_type, fn,
                CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END);
        END LOOP;
    END LOOP;
END
$$;
DROP TABLE ferry.definitions_baseline;
DROP TABLE ferry.definitions;
