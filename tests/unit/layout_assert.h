/* layout_assert.h - comparing what a layout file held with what was
 * written, for the unit tests that round-trip layouts (test_layout_file,
 * test_model). Include after <cmocka.h> and layout_file.h. */
#ifndef WST_TEST_LAYOUT_ASSERT_H
#define WST_TEST_LAYOUT_ASSERT_H

/* Field by field: the structs hold a pointer and padding. */
static inline void assert_experts_equal(const struct wst_layout_experts *a,
                                        const struct wst_layout_experts *b)
{
    assert_int_equal(a->layer, b->layer);
    assert_string_equal(a->loader, b->loader);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->n_experts, b->n_experts);
    assert_int_equal(a->ep_rank, b->ep_rank);
    assert_int_equal(a->ep_size, b->ep_size);
    assert_int_equal(a->hidden, b->hidden);
    assert_int_equal(a->inter, b->inter);
    assert_int_equal(a->n_expert_ids, b->n_expert_ids);
    if (a->n_expert_ids == 0) {
        assert_null(a->expert_ids);
        assert_null(b->expert_ids);
    } else {
        assert_memory_equal(a->expert_ids, b->expert_ids,
                            a->n_expert_ids * sizeof(*a->expert_ids));
    }
    assert_int_equal(a->inter_tp_rank, b->inter_tp_rank);
    assert_int_equal(a->inter_tp_size, b->inter_tp_size);
    assert_int_equal(a->w13_region, b->w13_region);
    assert_int_equal(a->w13_offset, b->w13_offset);
    assert_int_equal(a->w2_region, b->w2_region);
    assert_int_equal(a->w2_offset, b->w2_offset);
}

#endif
