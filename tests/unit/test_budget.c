/* budget_choose (src/plan/budget.c): the greedy over hand-made units, where
 * the right answer can be worked out on paper, and an exhaustive search
 * over small random cases that the greedy never exceeds the budget and never
 * leaves a fitting upgrade of a better ratio untaken. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "unit.h"

static budget_unit unit(uint64_t nv, uint64_t fp8, uint64_t keep, double err_nv, double err_fp8)
{
    budget_unit u = {0};
    u.bytes[SCHEME_NVFP4] = nv;
    u.bytes[SCHEME_FP8] = fp8;
    u.bytes[SCHEME_KEEP] = keep;
    u.score[SCHEME_NVFP4] = err_nv;
    u.score[SCHEME_FP8] = err_fp8;
    return u;
}

static plan_budget with(budget_unit *u, size_t n, uint64_t floor, uint64_t budget)
{
    plan_budget b = {0};
    b.units = u;
    b.nunits = n;
    b.floor = floor;
    b.budget = budget;
    return b;
}

/* The unit with the most error per byte goes first; what is left buys the
 * next one that still fits, even past one that does not. */
static void test_greedy_order_and_fill(void)
{
    budget_unit u[3] = {unit(10, 20, 40, 100, 10), unit(10, 20, 40, 50, 5), unit(10, 15, 30, 20, 2)};
    plan_budget b = with(u, 3, 100, 100 + 10 + 5);
    CHECK(budget_choose(&b) == 0);
    /* ratios to FP8: 90/10, 45/10, 18/5; the second's 10 bytes do not fit after the first */
    CHECK_EQ_INT(u[0].scheme, SCHEME_FP8);
    CHECK_EQ_INT(u[1].scheme, SCHEME_NVFP4);
    CHECK_EQ_INT(u[2].scheme, SCHEME_FP8);
    CHECK_EQ_INT(b.chosen, 115);
    CHECK_EQ_INT(b.nfp8, 2);
    CHECK_EQ_INT(b.ceiling, 100 + 30 + 30 + 20);
}

/* Going straight to kept removes more per byte than FP8 alone: one step. */
static void test_straight_to_kept(void)
{
    budget_unit u[1] = {unit(10, 20, 22, 100, 90)};
    plan_budget b = with(u, 1, 50, 50 + 12);
    CHECK(budget_choose(&b) == 0);
    CHECK_EQ_INT(u[0].scheme, SCHEME_KEEP);
    CHECK_EQ_INT(b.nkeep, 1);
    b = with(u, 1, 50, 50 + 11);
    CHECK(budget_choose(&b) == 0);
    CHECK_EQ_INT(u[0].scheme, SCHEME_NVFP4);   /* FP8 is never the better buy for it */
}

/* The budget of the floor changes nothing; one of the ceiling keeps all. */
static void test_floor_and_ceiling(void)
{
    budget_unit u[2] = {unit(10, 20, 40, 100, 10), unit(8, 16, 32, 30, 3)};
    plan_budget b = with(u, 2, 1000, 1000);
    CHECK(budget_choose(&b) == 0);
    CHECK_EQ_INT(b.chosen, 1000);
    CHECK_EQ_INT(b.nfp8 + b.nkeep, 0);
    b = with(u, 2, 1000, 1000 + 30 + 24);
    CHECK(budget_choose(&b) == 0);
    CHECK_EQ_INT(b.nkeep, 2);
    CHECK_EQ_INT(b.chosen, b.ceiling);
}

/* Random units: the total never passes the budget, and no single upgrade
 * left untaken would still fit. */
static void test_random_within_budget(void)
{
    srand(7);
    for (int round = 0; round < 500; round++) {
        budget_unit u[6];
        size_t n = 1 + (size_t)(rand() % 6);
        uint64_t top = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t nv = 1 + (uint64_t)(rand() % 50);
            u[i] = unit(nv, 2 * nv + (uint64_t)(rand() % 3), 4 * nv, 1 + rand() % 1000, rand() % 50);
            top += u[i].bytes[SCHEME_KEEP] - nv;
        }
        plan_budget b = with(u, n, 500, 500 + (uint64_t)rand() % (top + 1));
        CHECK(budget_choose(&b) == 0);
        CHECK(b.chosen <= b.budget);
        uint64_t sum = b.floor;
        for (size_t i = 0; i < n; i++)
            sum += u[i].bytes[u[i].scheme] - u[i].bytes[SCHEME_NVFP4];
        CHECK_EQ_INT(sum, b.chosen);
        for (size_t i = 0; i < n; i++) {
            const budget_unit *x = &u[i];
            double to_fp8 = (x->score[0] - x->score[1]) / (double)(x->bytes[1] - x->bytes[0]);
            double to_keep = x->score[1] / (double)(x->bytes[2] - x->bytes[1]);
            /* the upgrade on offer: FP8 first, or straight to kept when that is the better buy */
            budget_scheme next = x->scheme == SCHEME_NVFP4 && to_fp8 >= to_keep ? SCHEME_FP8 : SCHEME_KEEP;
            if (x->scheme != SCHEME_KEEP)
                CHECK(b.chosen + x->bytes[next] - x->bytes[x->scheme] > b.budget);
        }
    }
}

int main(void)
{
    RUN(test_greedy_order_and_fill);
    RUN(test_straight_to_kept);
    RUN(test_floor_and_ceiling);
    RUN(test_random_within_budget);
    return UNIT_END();
}
