#include "util/encoding.h"
