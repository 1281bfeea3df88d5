-- A 撤回, a person's /忘记 and the console's delete look up the distilled memories drawn from
-- some turns (`source_turn_ids && ARRAY[...]`, memory_core/distill/store.py). Since each fact
-- keeps the turns it cites rather than its whole batch, that lookup runs on every 撤回; the
-- GIN index answers it without reading every distilled row.
CREATE INDEX distilled_source_turns ON distilled_memories USING gin (source_turn_ids);
