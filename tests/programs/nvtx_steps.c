/* A tiny "training loop" annotated with NVTX, for tests and demo captures; needs no GPU.

   usage: nvtx_steps STEPS [FORWARD_US [BACKWARD_US [HOST_US]]]

   Each step is a push/pop range "step" holding "forward" (spins FORWARD_US microseconds, default
   100) and "backward" (spins BACKWARD_US, default 2 x FORWARD_US). The whole loop sits in a
   start/end range "epoch" of the domain "triage", whose text is a registered string (so exports
   carry it as textId), and each step ends with a mark "step done" (marks are not ranges).
   Ranges recorded: 3 x STEPS push/pop + 1 start/end. Zero microseconds spin nothing, for
   captures with many short ranges. HOST_US (default 0) is spun once per step before the epoch
   opens, outside every range: host time no range accounts for. The program ends by printing the
   mean step time of the loop ("step time: 0.312 ms"), the number `triage bench --metric` reads. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static volatile unsigned long sink;

static void spin(long us)
{
    double end = now_us() + us;
    while (us > 0 && now_us() < end)
        sink++;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s STEPS [FORWARD_US [BACKWARD_US]]\n", argv[0]);
        return 2;
    }
    long steps = atol(argv[1]);
    long forward = argc > 2 ? atol(argv[2]) : 100;
    long backward = argc > 3 ? atol(argv[3]) : 2 * forward;
    long host = argc > 4 ? atol(argv[4]) : 0;

    spin(host * steps);

    nvtxDomainHandle_t domain = nvtxDomainCreateA("triage");
    nvtxEventAttributes_t epoch = {0};
    epoch.version = NVTX_VERSION;
    epoch.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    epoch.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    epoch.message.registered = nvtxDomainRegisterStringA(domain, "epoch");
    nvtxRangeId_t epoch_id = nvtxDomainRangeStartEx(domain, &epoch);
    double loop_start = now_us();

    for (long i = 0; i < steps; i++) {
        nvtxRangePushA("step");
        nvtxRangePushA("forward");
        spin(forward);
        nvtxRangePop();
        nvtxRangePushA("backward");
        spin(backward);
        nvtxRangePop();
        nvtxRangePop();
        nvtxMarkA("step done");
    }
    double loop_us = now_us() - loop_start;
    nvtxDomainRangeEnd(domain, epoch_id);
    nvtxDomainDestroy(domain);
    printf("%ld steps\n", steps);
    printf("step time: %.4f ms\n", steps > 0 ? loop_us / steps / 1000.0 : 0.0);
    return 0;
}
